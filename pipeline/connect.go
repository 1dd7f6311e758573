package pipeline

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
)

// Credentials say how a process logs in to the broker. Every broker connection of svc
// (the log service, the portal, log-admin, replay, exports, bench, gateways and SDKs
// over log.nats) is opened by Connect with them, so the forms below work everywhere.
type Credentials struct {
	// URL is one or more comma-separated nats:// URLs of the cluster's nodes
	// (nats://svc:PASSWORD@nats-1:4222,nats-2:4222,nats-3:4222). User and password
	// (or a token, nats://TOKEN@host) written in the first URL are used for every
	// node, not only the first: nats.go alone would send them to the first node
	// only, and the loss of that node would then lock every process out.
	URL string
	// CredsFile is a NATS credentials file (a user JWT and its nkey seed, as nsc
	// writes it) for a cluster in operator mode.
	CredsFile string
	// NKeyFile is a file holding an nkey user seed (SU…, as `svc keygen --nats-nkey`
	// writes it), for a server that admits the matching public key (authorization {
	// users: [{nkey: U…}] }, and the embedded server's --nats-listen).
	NKeyFile string
	// Token is a NATS authentication token (SPEC.md's log.tokenEnv).
	Token string
}

// Options returns the nats.go options that carry c's credentials to every node.
func (c Credentials) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if c.CredsFile != "" && c.NKeyFile != "" {
		return nil, errors.New("give either a NATS credentials file or an nkey seed file, not both")
	}
	if u := firstUserinfo(c.URL); u != nil {
		if pw, ok := u.Password(); ok {
			opts = append(opts, nats.UserInfo(u.Username(), pw))
		} else if c.Token == "" {
			opts = append(opts, nats.Token(u.Username()))
		}
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file %s: %w", c.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// firstUserinfo is the user information of the first of a comma-separated list of
// URLs, nil when it has none or does not parse.
func firstUserinfo(urls string) *url.Userinfo {
	first, _, _ := strings.Cut(urls, ",")
	u, err := url.Parse(strings.TrimSpace(first))
	if err != nil {
		return nil
	}
	return u.User
}

// Connect opens a connection named name to the broker at c.URL with c's credentials,
// reconnecting for ever (to any node of the cluster) after a loss, plus extra options.
// Its error names the URL redacted: no password or token reaches a message.
func Connect(c Credentials, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.Name(name), nats.MaxReconnects(-1))
	nc, err := nats.Connect(c.URL, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(c.URL), err)
	}
	return nc, nil
}

// RedactURL returns urls (one URL or a comma-separated list) with every password
// and token replaced by "xxxxx", for messages, logs and /health. Anything that does
// not parse as a URL is replaced whole when it could hold a secret (it has an "@").
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

func redactOne(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Opaque != "" {
		if strings.Contains(s, "@") {
			return "xxxxx@" + s[strings.LastIndex(s, "@")+1:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		u.User = url.User("xxxxx") // a user without a password is a token
	}
	return u.String()
}
