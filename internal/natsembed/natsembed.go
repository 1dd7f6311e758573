// Package natsembed runs nats-server in-process with JetStream: the broker of the
// embedded default (no TCP listener unless asked, its store under the data directory).
// Only server processes and tests link it; producers reach the broker with nats.go
// (package pipeline).
package natsembed

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"svc.dev/svc/pipeline"
)

// Config configures the in-process nats-server of the embedded default.
type Config struct {
	// DataDir holds the JetStream store (under DataDir/nats). Required.
	DataDir string
	// Listen, when set ("127.0.0.1:4222", ":-1" for a random port), opens a TCP
	// listener so other processes (sidecars, gateways) can reach the broker. Empty: no
	// listener at all, so the process never collides with a NATS already on 4222.
	Listen string
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

// Connect opens an in-process client connection to s.
func Connect(s *server.Server, name string) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(s), nats.Name(name), nats.MaxReconnects(-1))
}
