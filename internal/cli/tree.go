package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// commandGroup is one heading of the root's --help and the top-level
// commands under it, in the order they are listed.
type commandGroup struct {
	group    cobra.Group
	commands []func() *cobra.Command
}

// setupGroup holds help and completion too.
const setupGroup = "setup"

// commandGroups is the whole top level: every command is in one group,
// and the groups read in the order a user meets them, joining first.
func commandGroups() []commandGroup {
	return []commandGroup{
		{cobra.Group{ID: "join", Title: "Join and leave:"},
			[]func() *cobra.Command{newStartCommand, newPreflightCommand, newResetCommand}},
		{cobra.Group{ID: "fleet", Title: "Fleet and cluster:"},
			[]func() *cobra.Command{newClusterCommand, newFleetCommand, newTokenCommand}},
		{cobra.Group{ID: "day2", Title: "Day 2:"},
			[]func() *cobra.Command{newStatusCommand, newDebugCommand, newNodeCommand, newAgentUpgradeCommand}},
		{cobra.Group{ID: "provisioning", Title: "Provisioning:"},
			[]func() *cobra.Command{newIgnitionCommand, newInstallServiceCommand, newUninstallServiceCommand, newAgentCommand}},
		{cobra.Group{ID: "building", Title: "Building:"},
			[]func() *cobra.Command{newImageCommand, newArtifactsCommand}},
		{cobra.Group{ID: setupGroup, Title: "Setup:"},
			[]func() *cobra.Command{newConfigCommand, newLayoutCommand, newHostCommand, newVersionCommand, newCompletionCommand}},
	}
}

// addGroups adds every top-level command to root under its group.
func addGroups(root *cobra.Command) {
	// Listed as the groups order them (start first), not alphabetically.
	// cobra keeps this switch in a package variable; this binary has one
	// command tree.
	cobra.EnableCommandSorting = false
	for _, g := range commandGroups() {
		root.AddGroup(&g.group)
		for _, newCmd := range g.commands {
			c := newCmd()
			c.GroupID = g.group.ID
			root.AddCommand(c)
		}
	}
	root.SetHelpCommandGroupID(setupGroup)
	root.SetCompletionCommandGroupID(setupGroup)
}

// applyArgsRule makes the argument rule hold for every command under c,
// in one place: a bad positional argument is a usage error (exit 2), and
// a parent run without a subcommand names its subcommands, also exit 2.
// A leaf that declares no argument rule takes no arguments.
func applyArgsRule(c *cobra.Command) {
	for _, sub := range c.Commands() {
		applyArgsRule(sub)
	}
	switch {
	case !c.HasParent():
		// The root: cobra reports an unknown command (see ExitCode) and
		// prints help when run alone.
		return
	case c.HasSubCommands() && !c.Runnable():
		c.Args = unknownSubcommand
		c.RunE = nameASubcommand
		c.SuggestionsMinimumDistance = 2 // cobra's for the root's
	case c.Args == nil:
		c.Args = cobra.NoArgs
	}
	c.Args = usageArgs(c.Args)
}

// usageArgs turns v's positional-argument errors into usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return invalidf("%v (see '%s --help')", err, cmd.CommandPath())
		}
		return nil
	}
}

// unknownSubcommand is a parent's argument rule: any argument is a
// subcommand it does not have; a near miss is named.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return errors.New(msg)
}

// nameASubcommand is what a parent does run alone: it lists its
// subcommands, read from the tree so the list cannot fall behind it.
func nameASubcommand(cmd *cobra.Command, _ []string) error {
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	list := names[len(names)-1]
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " or " + list
	}
	return invalid(fmt.Errorf("%s: name a subcommand: %s (see '%s --help')", cmd.Name(), list, cmd.CommandPath()))
}
