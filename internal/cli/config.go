package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect and validate the configuration file",
	}
	cmd.AddCommand(newConfigViewCommand(), newConfigValidateCommand(), newConfigGenerateCommand(), newConfigMigrateCommand())
	return cmd
}

func addConfigFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "config", "c", layout.ConfigFile, "path of the config file")
}

// loadConfig reads the file and classifies failures: an unreadable file is a
// runtime failure (1), a file that is not a valid config is invalid input (2).
// The file's deprecation notes go to stderr, one line each.
func loadConfig(path string, stderr io.Writer) (*config.Config, error) {
	c, err := config.Load(path)
	if err != nil {
		var ie *config.InvalidError
		if errors.As(err, &ie) {
			return nil, invalid(err)
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	printNotes(stderr, path, c)
	return c, nil
}

// printNotes says which upstream names the file uses, and their new ones.
func printNotes(w io.Writer, path string, c *config.Config) {
	for _, n := range c.Notes() {
		fmt.Fprintf(w, "aks-flex-node: config %s: deprecated: %s\n", path, n)
	}
}

func newConfigViewCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "view",
		Short: "Print the effective config (defaults applied, secrets redacted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig(path, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeJSON(cmd.OutOrStdout(), c.Redacted())
		},
	}
	addConfigFlag(cmd, &path)
	return cmd
}

type validateResult struct {
	Valid  bool          `json:"valid"`
	File   string        `json:"file"`
	Errors []resultError `json:"errors"`
	// Notes are deprecations: upstream names read as this schema's.
	Notes []string `json:"notes"`
}

type resultError struct {
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

func newConfigValidateCommand() *cobra.Command {
	var path, output string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check the config file; exit 0 when valid, 2 when not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, err := config.Load(path)
			var ie *config.InvalidError
			if err != nil && !errors.As(err, &ie) {
				return fmt.Errorf("config: %w", err)
			}
			res := validateResult{Valid: err == nil, File: path, Errors: []resultError{}, Notes: []string{}}
			if ie != nil {
				res.Errors = resultErrors(ie.Err)
			}
			if c != nil {
				res.Notes = append(res.Notes, c.Notes()...)
				if output != "json" {
					printNotes(cmd.ErrOrStderr(), path, c)
				}
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				if werr := writeJSON(out, res); werr != nil {
					return werr
				}
			} else if res.Valid {
				fmt.Fprintf(out, "config %s is valid\n", path)
			} else {
				fmt.Fprintln(cmd.ErrOrStderr(), ie.Error())
			}
			if !res.Valid {
				return &exitError{code: ExitInvalid, err: errSilent}
			}
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func resultErrors(err error) []resultError {
	var out []resultError
	var de config.DecodeErrors
	var ve config.ValidationErrors
	switch {
	case errors.As(err, &de):
		for _, e := range de {
			out = append(out, resultError{Path: e.Path, Line: e.Line, Column: e.Column, Message: e.Msg})
		}
	case errors.As(err, &ve):
		for _, e := range ve {
			out = append(out, resultError{Path: e.Path, Message: e.Msg})
		}
	default:
		out = append(out, resultError{Message: err.Error()})
	}
	return out
}
