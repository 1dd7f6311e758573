package portal

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/scrypt"
)

// ScryptParams is the cost of a password hash (N a power of two).
type ScryptParams struct {
	N, R, P int
}

// DefaultScrypt: N=32768, r=8, p=1 (32 MiB and tens of milliseconds per hash).
var DefaultScrypt = ScryptParams{N: 1 << 15, R: 8, P: 1}

const keyLen = 32

var b64 = base64.RawStdEncoding

// hashPassword returns "scrypt$N$r$p$<salt>$<key>" with a fresh 16-byte salt.
func hashPassword(password string, sp ScryptParams) (string, error) {
	var salt [16]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return "", err
	}
	key, err := scrypt.Key([]byte(password), salt[:], sp.N, sp.R, sp.P, keyLen)
	if err != nil {
		return "", fmt.Errorf("scrypt: %w", err)
	}
	return fmt.Sprintf("scrypt$%d$%d$%d$%s$%s", sp.N, sp.R, sp.P, b64.EncodeToString(salt[:]), b64.EncodeToString(key)), nil
}

// checkPassword reports whether password matches a hash of hashPassword, in
// constant time over the key.
func checkPassword(password, stored string) (bool, error) {
	parts := strings.Split(stored, "$")
	if len(parts) != 6 || parts[0] != "scrypt" {
		return false, errors.New("stored password hash is not scrypt$N$r$p$salt$key")
	}
	var sp [3]int
	for i := range sp {
		n, err := strconv.Atoi(parts[1+i])
		if err != nil || n <= 0 || n > 1<<20 {
			return false, errors.New("stored password hash has bad parameters")
		}
		sp[i] = n
	}
	if sp[1] > 64 || sp[2] > 64 || 128*sp[0]*sp[1] > 1<<30 {
		return false, errors.New("stored password hash asks for more than 1 GiB of scrypt memory")
	}
	salt, err1 := b64.DecodeString(parts[4])
	want, err2 := b64.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 {
		return false, errors.New("stored password hash is not base64")
	}
	got, err := scrypt.Key([]byte(password), salt, sp[0], sp[1], sp[2], len(want))
	if err != nil {
		return false, fmt.Errorf("scrypt: %w", err)
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// Defaults of the bound on concurrent password hashing (Config.MaxHashing,
// Config.HashWait).
const (
	// DefaultMaxHashing is how many scrypt computations run at once: with
	// DefaultScrypt's 32 MiB each, at most 128 MiB of hashing memory whatever the
	// number of clients or addresses.
	DefaultMaxHashing = 4
	// DefaultHashWait is how long a login or registration waits for a hashing slot
	// before it is answered 503 with Retry-After.
	DefaultHashWait = 2 * time.Second
)

// hashGate bounds concurrent password hashing: a semaphore of Config.MaxHashing
// slots, each holding one scrypt computation's memory.
type hashGate struct {
	slots chan struct{}
	wait  time.Duration
}

func newHashGate(n int, wait time.Duration) *hashGate {
	return &hashGate{slots: make(chan struct{}, n), wait: wait}
}

// acquire takes a slot, waiting at most g.wait (or until ctx ends); it returns the
// release, or nil when no slot freed in time.
func (g *hashGate) acquire(ctx context.Context) func() {
	select {
	case g.slots <- struct{}{}:
		return g.release
	default:
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return g.release
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

func (g *hashGate) release() { <-g.slots }
