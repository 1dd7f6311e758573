// Package natsembed runs nats-server in-process with JetStream: the broker of the
// embedded default (no TCP listener unless asked, its store under the data directory).
// Only server processes and tests link it; producers reach the broker with nats.go
// (package pipeline).
package natsembed

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"svc.dev/svc/pipeline"
)

// Config configures the in-process nats-server of the embedded default.
type Config struct {
	// DataDir holds the JetStream store (under DataDir/nats). Required.
	DataDir string
	// Listen, when set ("127.0.0.1:4222", ":-1" for a random port), opens a TCP
	// listener so other processes (sidecars, gateways) can reach the broker. Empty: no
	// listener at all, so the process never collides with a NATS already on 4222.
	// A listener requires credentials: NKeyFile, Password or both (Start refuses neither).
	Listen string
	// NKeyFile is a file holding an nkey user seed (svc keygen --nats-nkey); the
	// server admits that user only, over the listener and in-process alike.
	NKeyFile string
	// Password admits user "svc" with this password as well (gateways and SDKs, whose
	// log.nats URL carries it: nats://svc:PASSWORD@host:port; test kits).
	Password string
	// NoSync turns off fsync per write. Only tests that measure something else use it;
	// without fsync an acknowledged leaf survives a process kill but not a machine crash.
	NoSync bool
}

// Start starts nats-server in-process with JetStream and waits until it is
// ready.
func Start(cfg Config) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("embedded nats: no data directory")
	}
	opts := &server.Options{
		ServerName:         "svc-embedded",
		JetStream:          true,
		StoreDir:           filepath.Join(cfg.DataDir, "nats"),
		SyncAlways:         !cfg.NoSync,
		MaxPayload:         pipeline.MaxBatchBytes + 64<<10,
		NoSigs:             true,
		NoLog:              true,
		DontListen:         cfg.Listen == "",
		JetStreamMaxMemory: 256 << 20,
	}
	if err := cfg.auth(opts); err != nil {
		return nil, err
	}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("--nats-listen %q: want host:port: %w", cfg.Listen, err)
		}
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("--nats-listen %q: port: %w", cfg.Listen, err)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 10s (store %s)", opts.StoreDir)
	}
	return s, nil
}

// auth sets the users of opts: the nkey of NKeyFile and/or user "svc" with Password. A
// listener without either is refused: any local user could otherwise publish
// administrative events (tokens, plans) onto SVC_ADMIN.
func (cfg Config) auth(opts *server.Options) error {
	if cfg.NKeyFile != "" {
		pub, err := publicKey(cfg.NKeyFile)
		if err != nil {
			return err
		}
		opts.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	}
	if cfg.Password != "" {
		opts.Users = []*server.User{{Username: User, Password: cfg.Password}}
	}
	if cfg.Listen != "" && cfg.NKeyFile == "" && cfg.Password == "" {
		return fmt.Errorf("--nats-listen %s needs --nats-nkey <file> (the user the listener admits; create one with svc keygen --nats-nkey <file>)", cfg.Listen)
	}
	return nil
}

// User is the user name Config.Password admits.
const User = "svc"

// publicKey is the public key of the nkey user seed in file.
func publicKey(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--nats-nkey: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", fmt.Errorf("--nats-nkey %s: not an nkey seed: %w", file, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("--nats-nkey %s: not an nkey user seed (want SU…)", file)
	}
	return pub, nil
}

// Connect opens an in-process client connection to s, logging in with c's nkey seed
// or the user and password of c.URL (whose host is not used).
func Connect(s *server.Server, name string, c pipeline.Credentials) (*nats.Conn, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.InProcessServer(s), nats.Name(name), nats.MaxReconnects(-1))
	return nats.Connect("", opts...)
}

// URL is the client URL of s, started with Config.Password, with user and password in
// it (test kits hand it to other processes as their --nats-url).
func URL(s *server.Server, password string) string {
	return strings.Replace(s.ClientURL(), "nats://", "nats://"+User+":"+password+"@", 1)
}
