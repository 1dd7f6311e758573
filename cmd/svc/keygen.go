package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"

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

With --nats-nkey <file> it writes instead a fresh NATS nkey user seed (SU…, mode
0600, never overwriting) and prints the user's public key (U…): the credentials of a
broker listener (svc log --nats-listen with --nats-nkey <file>; svc log-admin and
svc portal log in with the same --nats-nkey <file>), or of a NATS cluster whose
configuration admits that public key (authorization { users: [{nkey: U…}] }).

Example:
  svc keygen --dir keys --name principal
  svc keygen --nats-nkey data/hosted/nats.nk`

func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keygen", "--dir <d> --name <n>", keygenDescription, stderr)
	dir := fs.String("dir", ".", "directory to write the key files into (created if absent)")
	name := fs.String("name", "", "base name of the key files: writes <name>.key and <name>.pub (required)")
	nkey := fs.String("nats-nkey", "", "instead: write a fresh NATS nkey user seed to `file` (mode 0600) and print its public key")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if *nkey != "" {
		return writeNKey(*nkey, stdout)
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

// writeNKey writes a fresh nkey user seed to path (0600, never overwriting) and
// prints its public key.
func writeNKey(path string, stdout io.Writer) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("generate nkey: %w", err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("refusing to overwrite %s; remove it or pick another file", path)
	} else if err != nil {
		return err
	}
	_, err = f.Write(append(seed, '\n'))
	if err2 := f.Close(); err == nil {
		err = err2
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "nkey seed    %s (mode 0600; keep it secret)\n", path)
	fmt.Fprintf(stdout, "public key   %s\n", pub)
	return nil
}
