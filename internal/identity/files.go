package identity

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// SecretFileReader reads a file that holds a credential, given its host
// path, and refuses one others could read.
type SecretFileReader func(path string) ([]byte, error)

// maxSecretFile bounds what is read of a credential file: a certificate
// chain with its key is a few KiB.
const maxSecretFile = 1 << 20

// ReadSecretFile reads credential files on root ("/" on a live host). A
// file that holds a credential must be a regular file, mode 0600 (or
// stricter) and owned by root: anything looser lets another user sign in
// as the node.
func ReadSecretFile(root string) SecretFileReader {
	return func(p string) ([]byte, error) {
		host, err := fsroot.Resolve(root, p)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(host)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if err := CheckSecretFileInfo(p, fi); err != nil {
			return nil, err
		}
		data, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if len(data) > maxSecretFile {
			return nil, fmt.Errorf("%s is larger than %d bytes; it is not a certificate file", p, maxSecretFile)
		}
		return data, nil
	}
}

// ErrLooseSecretFile is what CheckSecretFileInfo returns for a credential
// file others may read or that root does not own.
var ErrLooseSecretFile = errors.New("a file holding a credential must be mode 0600 and owned by root")

// CheckSecretFileInfo checks what ReadSecretFile requires of p's info.
func CheckSecretFileInfo(p string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", p, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: %w (chmod 600 %s)", p, perm, ErrLooseSecretFile, p)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d: %w (chown root:root %s)", p, st.Uid, ErrLooseSecretFile, p)
	}
	return nil
}

// CheckConfigFile refuses a config file that holds a client secret when
// others may read it or root does not own it, as a certificate file is
// refused. path is the file as this process opens it.
func CheckConfigFile(path string, sp *config.ServicePrincipal) error {
	if sp == nil || sp.ClientSecret == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := CheckSecretFileInfo(path, fi); err != nil {
		return fmt.Errorf("azure.servicePrincipal.clientSecret is in %w", err)
	}
	return nil
}
