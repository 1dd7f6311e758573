// Package pgtest gives each test a database of its own on the real PostgreSQL of
// SVC_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test): a fresh
// database with a random name, dropped when the test ends, so tests never collide.
// When no server answers, the test fails under CI (CI set) and is skipped with the
// reason otherwise.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server tests use when SVC_TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test"

// BaseURL is the test server's URL.
func BaseURL() string {
	if u := os.Getenv("SVC_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// New creates an empty database for t and returns its URL.
func New(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s does not answer (go tool task setup starts one): %v", base, err)
		}
		t.Skipf("PostgreSQL at %s does not answer: %v (set SVC_TEST_DATABASE_URL)", base, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "svctest_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
