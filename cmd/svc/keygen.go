package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"svc.dev/svc/signer"
)

func init() {
	register("keygen", "create an Ed25519 key pair (<name>.key private, <name>.pub public)", runKeygen)
}

const keygenDescription = `Creates a fresh Ed25519 key pair: <dir>/<name>.key holds the private key
(PKCS#8 PEM "PRIVATE KEY", mode 0600; keep it secret) and <dir>/<name>.pub the
public key (SPKI PEM "PUBLIC KEY"; hand it to verifiers, gateways and delegators).
The keyid printed is the hex SHA-256 of the public key's SPKI DER encoding, the id
signatures carry. The directory is created if absent. keygen never overwrites: if
either file exists it refuses, so a typo cannot destroy a signing key.

Example:
  svc keygen --dir keys --name principal`

func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keygen", "--dir <d> --name <n>", keygenDescription, stderr)
	dir := fs.String("dir", ".", "directory to write the key files into (created if absent)")
	name := fs.String("name", "", "base name of the key files: writes <name>.key and <name>.pub (required)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if *name == "" {
		return usagef("--name is required (the key files are <name>.key and <name>.pub)")
	}
	if filepath.Base(*name) != *name || *name == "." || *name == ".." {
		return usagef("--name %q must be a plain file name; put the directory in --dir", *name)
	}
	if *dir == "" {
		return usagef("--dir must not be empty")
	}
	for _, p := range []string{filepath.Join(*dir, *name+".key"), filepath.Join(*dir, *name+".pub")} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("refusing to overwrite %s; remove it or pick another --name", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	key, err := signer.GenerateKey()
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	keyPath, pubPath, err := key.WriteKeyFiles(*dir, *name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "keyid        %s\n", key.KeyID())
	fmt.Fprintf(stdout, "private key  %s (mode 0600; keep it secret)\n", keyPath)
	fmt.Fprintf(stdout, "public key   %s\n", pubPath)
	return nil
}
