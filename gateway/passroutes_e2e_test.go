package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// passFixture is two MCP upstreams offering resources, prompts and completion behind
// the gateway, passed through: "everything" (the npm server-everything, on
// 2025-11-25) and "modern" (e2e/modern-server.mjs, the official TypeScript SDK's
// server package on 2026-07-28, its tools prefixed modern_), with modernEnv its
// environment.
func passFixture(t *testing.T, modernEnv map[string]string) *fixture {
	t.Helper()
	if modernEnv == nil {
		modernEnv = map[string]string{}
	}
	modernEnv["TOOL_PREFIX"] = "modern_"
	nm := nodeModules(t)
	f := keyedFixture(t)
	f.writeGrant(t, "grant.json", []string{"echo", "resources", "prompts", "completion"}, time.Now().Add(-time.Minute), 24*time.Hour, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`permit (principal, action, resource);`), 0o644)
	f.writeConfig(map[string]any{
		"identity": map[string]any{"keyFile": "gateway.key"},
		"upstreams": []map[string]any{
			{"name": "everything", "command": "node", "args": []string{filepath.Join(nm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
			{"name": "modern", "command": "node", "args": []string{filepath.Join(repoDir, "e2e", "modern-server.mjs")}, "env": modernEnv},
		},
		"grantFile": "grant.json", "trustedPrincipalKeys": []string{"alice.pub"}, "policyFile": "policy.cedar",
		"receiptsDir": "receipts", "logFile": "receipts.log", "passThrough": []string{"resources", "prompts", "completion"},
	})
	return f
}

// TestPassThroughReachesEveryUpstream: with two upstreams offering resources, prompts
// and completion, an agent (on either revision) lists the union of both upstreams'
// resources, templates and prompts, in one page, and each read, get and completion
// reaches the upstream that listed what it names: a resource, a resource template's
// URI, a prompt, of either. The 2026-07-28 upstream answers only requests that carry
// that revision's _meta (its missing envelope is -32602), so these pass only when
// the gateway's hop declares its own revision.
func TestPassThroughReachesEveryUpstream(t *testing.T) {
	f := passFixture(t, nil)
	for _, version := range []string{mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.LATEST_PROTOCOL_VERSION} {
		t.Run(version, func(t *testing.T) {
			c, stop := stdioAgent(t, f.config, version, mcp.ClientCapabilities{})
			defer stop()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			prompts, err := c.ListPromptsByPage(ctx, mcp.ListPromptsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range prompts.Prompts {
				names = append(names, p.Name)
			}
			if !slices.Contains(names, "simple-prompt") || !slices.Contains(names, "deploy-plan") || prompts.NextCursor != "" {
				t.Fatalf("prompts/list: %v (next %q), want both upstreams' prompts in one page", names, prompts.NextCursor)
			}
			for name, want := range map[string]string{"deploy-plan": "deploy-plan from modern: deploy to prod", "simple-prompt": "This is a simple prompt without arguments."} {
				req := mcp.GetPromptRequest{}
				req.Params.Name, req.Params.Arguments = name, map[string]string{"env": "prod"}
				res, err := c.GetPrompt(ctx, req)
				if err != nil || len(res.Messages) == 0 || res.Messages[0].Content.(mcp.TextContent).Text != want {
					t.Fatalf("prompts/get %s: %v %+v, want %q", name, err, res, want)
				}
			}
			checkPassResources(ctx, t, c)
			checkPassCompletion(ctx, t, c)
			req := mcp.ListPromptsRequest{}
			req.Params.Cursor = "anything"
			if _, err := c.ListPromptsByPage(ctx, req); err == nil || !strings.Contains(err.Error(), "gave no cursor") {
				t.Fatalf("prompts/list with a cursor: %v, want the gateway's refusal", err)
			}
		})
	}
}

// checkPassResources: the union of resources and templates, and reads of each
// upstream's resource and template URI.
func checkPassResources(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	res, err := c.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range res.Resources {
		uris = append(uris, r.URI)
	}
	if !slices.Contains(uris, "modern://notes/today") || !slices.ContainsFunc(uris, func(u string) bool { return strings.HasPrefix(u, "demo://") }) || res.NextCursor != "" {
		t.Fatalf("resources/list: %v (next %q), want both upstreams' resources in one page", uris, res.NextCursor)
	}
	tpl, err := c.ListResourceTemplatesByPage(ctx, mcp.ListResourceTemplatesRequest{})
	if err != nil || !slices.ContainsFunc(tpl.ResourceTemplates, func(r mcp.ResourceTemplate) bool { return r.URITemplate.Raw() == "modern://notes/{day}" }) ||
		!slices.ContainsFunc(tpl.ResourceTemplates, func(r mcp.ResourceTemplate) bool { return strings.HasPrefix(r.URITemplate.Raw(), "demo://") }) {
		t.Fatalf("resources/templates/list: %v %+v, want both upstreams' templates", err, tpl)
	}
	for uri, want := range map[string]string{"modern://notes/today": "notes of today", "modern://notes/tuesday": "notes of tuesday", "demo://resource/dynamic/text/1": "Resource 1"} {
		req := mcp.ReadResourceRequest{}
		req.Params.URI = uri
		res, err := c.ReadResource(ctx, req)
		if err != nil || len(res.Contents) != 1 || !strings.Contains(res.Contents[0].(mcp.TextResourceContents).Text, want) {
			t.Fatalf("resources/read %s: %v %+v, want %q", uri, err, res, want)
		}
	}
}

// checkPassCompletion: completions of the modern upstream's prompt and template, and
// of the everything server's prompt.
func checkPassCompletion(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	for _, tc := range []struct {
		ref         any
		arg, prefix string
		want        string
	}{
		{mcp.PromptReference{Type: "ref/prompt", Name: "deploy-plan"}, "env", "pr", "prod,preview"},
		{mcp.ResourceReference{Type: "ref/resource", URI: "modern://notes/{day}"}, "day", "tu", "tuesday"},
		{mcp.PromptReference{Type: "ref/prompt", Name: "completable-prompt"}, "department", "Sa", "Sales"},
	} {
		req := mcp.CompleteRequest{}
		req.Params.Ref = tc.ref
		req.Params.Argument.Name, req.Params.Argument.Value = tc.arg, tc.prefix
		res, err := c.Complete(ctx, req)
		if err != nil || strings.Join(res.Completion.Values, ",") != tc.want {
			t.Fatalf("completion/complete %+v %s=%q: %v %+v, want %s", tc.ref, tc.arg, tc.prefix, err, res, tc.want)
		}
	}
}

// TestPassThroughRefusesAPromptTwoUpstreamsList: a prompt name both upstreams list is
// passed to neither, with an error naming them; the others still reach their
// upstream.
func TestPassThroughRefusesAPromptTwoUpstreamsList(t *testing.T) {
	f := passFixture(t, map[string]string{"COLLIDE_PROMPT": "simple-prompt"})
	c, stop := stdioAgent(t, f.config, mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.ClientCapabilities{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := mcp.GetPromptRequest{}
	req.Params.Name = "simple-prompt"
	_, err := c.GetPrompt(ctx, req)
	if err == nil || !strings.Contains(err.Error(), `prompt "simple-prompt" is listed by more than one upstream (everything, modern)`) {
		t.Fatalf("prompts/get of a prompt both upstreams list: %v, want a refusal naming both", err)
	}
	req.Params.Name, req.Params.Arguments = "deploy-plan", map[string]string{"env": "preview"}
	if res, err := c.GetPrompt(ctx, req); err != nil || res.Messages[0].Content.(mcp.TextContent).Text != "deploy-plan from modern: deploy to preview" {
		t.Fatalf("prompts/get deploy-plan: %v %+v", err, res)
	}
}
