package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"text/tabwriter"
)

// `router plugin state NAME`: a running router's plugin state, over its
// socket (or -addr): the plugin's namespaces; with -type, its keys; with
// -delete, remove one key (-key) or a prefix (-prefix).
func (c *PluginCommand) state(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router plugin state", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	af := &apiFlags{}
	af.register(fs)
	typ := fs.String("type", "", "the event type (or inbox queue) whose namespace to show or change")
	namespace := fs.String("namespace", "", "a shared namespace (a plugin block's state_namespace), instead of -type")
	tenant := fs.String("tenant", "", "with -type or -namespace: the tenant whose namespace it is (default: the default tenant)")
	prefix := fs.String("prefix", "", "only keys that start with this")
	key := fs.String("key", "", "with -delete: the one key to remove")
	del := fs.Bool("delete", false, "remove -key, or every key with -prefix (needs -type)")
	limit := fs.Int("limit", 100, "keys per page")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(rest) != 1 {
		return &exitError{code: pluginExitError, err: errors.New("usage: router plugin state NAME [-type T | -namespace N [-tenant X] [-prefix P]] [-delete (-type T | -namespace N) [-tenant X] (-key K | -prefix P)]")}
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	path := "/v1/plugins/" + url.PathEscape(rest[0]) + "/state"
	q := url.Values{}
	if *typ != "" {
		q.Set("type", *typ)
	}
	if *namespace != "" {
		q.Set("namespace", *namespace)
	}
	if *tenant != "" {
		q.Set("tenant", *tenant)
	}
	named := *typ != "" || *namespace != ""
	if *del {
		if !named || (*key == "") == !isSet(fs, "prefix") {
			return &exitError{code: pluginExitError, err: errors.New("-delete needs -type (or -namespace) and one of -key or -prefix")}
		}
		return c.stateDelete(ctx, cl, path, q, *key, *prefix)
	}
	if !named {
		return c.stateNamespaces(ctx, cl, path, af.output)
	}
	q.Set("prefix", *prefix)
	q.Set("limit", fmt.Sprint(*limit))
	return c.stateKeys(ctx, cl, path, q, af.output)
}

// stateDelete removes one key, or every key with a prefix.
func (c *PluginCommand) stateDelete(ctx context.Context, cl *apiClient, path string, q url.Values, key, prefix string) error {
	if key != "" {
		q.Set("key", key)
	} else {
		q.Set("prefix", prefix)
	}
	b, err := cl.do(ctx, "DELETE", path, q, nil)
	if err != nil {
		return err
	}
	var res struct{ Deleted int }
	json.Unmarshal(b, &res)
	fmt.Fprintf(c.Stdout, "deleted %d key(s)\n", res.Deleted)
	return nil
}

// stateKeys prints one page of a namespace's keys.
func (c *PluginCommand) stateKeys(ctx context.Context, cl *apiClient, path string, q url.Values, output format) error {
	var page struct {
		Keys []struct {
			Key         string  `json:"key"`
			Value       *string `json:"value"`
			ValueBase64 string  `json:"value_base64"`
			Expires     *string `json:"expires_at"`
		} `json:"keys"`
		Next string `json:"next_cursor"`
	}
	b, err := cl.getJSON(ctx, path, q, &page)
	if err != nil {
		return err
	}
	if output == formatJSON {
		return writeIndented(c.Stdout, b)
	}
	if len(page.Keys) == 0 {
		fmt.Fprintln(c.Stdout, "no keys") // as the namespaces say "no state", not a bare heading
		return nil
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tEXPIRES")
	for _, k := range page.Keys {
		v := "base64:" + k.ValueBase64
		if k.Value != nil {
			v = fmt.Sprintf("%q", *k.Value)
		}
		exp := "never"
		if k.Expires != nil {
			exp = *k.Expires
		}
		fmt.Fprintf(tw, "%q\t%s\t%s\n", k.Key, v, exp)
	}
	if page.Next != "" {
		fmt.Fprintf(tw, "(more: narrow with -prefix, or see them with -o json and the API's cursor)\n")
	}
	return tw.Flush()
}

func (c *PluginCommand) stateNamespaces(ctx context.Context, cl *apiClient, path string, output format) error {
	var res struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Tenant    string `json:"tenant"`
			Type      string `json:"type"`
			Shared    bool   `json:"shared"`
			Keys      int64  `json:"keys"`
			Bytes     int64  `json:"bytes"`
		} `json:"namespaces"`
	}
	b, err := cl.getJSON(ctx, path, nil, &res)
	if err != nil {
		return err
	}
	if output == formatJSON {
		return writeIndented(c.Stdout, b)
	}
	if len(res.Namespaces) == 0 {
		fmt.Fprintln(c.Stdout, "no state")
		return nil
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tTENANT\tTYPE\tKEYS\tBYTES")
	for _, ns := range res.Namespaces {
		typ := ns.Type
		if ns.Shared {
			typ = "(shared)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", ns.Namespace, ns.Tenant, typ, ns.Keys, ns.Bytes)
	}
	return tw.Flush()
}

// isSet says whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
