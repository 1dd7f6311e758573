package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// configEnv reads the environment variable a config field names (log.tokenEnv, an
// upstream's tokenEnv or rest.headerEnv). Unset or empty is an error naming the
// variable and the usual cause: an MCP client starts the gateway with only a few of
// its own variables, so the client's entry for the gateway must pass it in "env".
func configEnv(field, name string) (string, error) {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s: environment variable %s is not set in the gateway's environment. "+
		"An MCP client starts the gateway with only a few of its own variables (the TypeScript SDK: HOME, LOGNAME, PATH, SHELL, TERM, USER), "+
		`so set it in the client's entry for the gateway: "env": {"%s": "<value>"}`, field, name, name)
}

// startupErrorCode is the JSON-RPC error code of RefuseStdio's answer (the range
// JSON-RPC leaves to servers).
const startupErrorCode = -32000

// RefuseStdio is a stdio gateway that could not start: it reads the client's
// messages from in until the first request (initialize, from an MCP client) and
// answers it on out with a JSON-RPC error carrying "svc gateway cannot start: " and
// cause, so the client shows why instead of "Connection closed". Notifications are
// ignored; it returns at the first request, at the end of in, or at a line that is
// not JSON-RPC (or over 4 MiB).
func RefuseStdio(in io.Reader, out io.Writer, cause error) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), maxMCPBody)
	for sc.Scan() {
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			return fmt.Errorf("not a JSON-RPC message on stdin: %w", err)
		}
		if len(msg.ID) == 0 || string(msg.ID) == "null" {
			continue // a notification: nothing to answer
		}
		answer, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID,
			"error": map[string]any{"code": startupErrorCode, "message": "svc gateway cannot start: " + cause.Error()}})
		if err != nil {
			return err
		}
		_, err = out.Write(append(answer, '\n'))
		return err
	}
	return sc.Err()
}
