package api

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// Plugin state for the operator (docs/plugin-state.md):
//
//	GET    /v1/plugins/{name}/state                      the plugin's namespaces, with keys and bytes
//	GET    /v1/plugins/{name}/state?type=T&prefix=P      keys of one namespace (paged: limit, cursor)
//	DELETE /v1/plugins/{name}/state?type=T&key=K         one key
//	DELETE /v1/plugins/{name}/state?type=T&prefix=P      every key with the prefix ("" = all)
//
// type=T names the plugin's namespace on the type T; a plugin block with
// state_namespace keeps one shared namespace, named by type too or by
// namespace=N. Each tenant has its own (storage.TenantNamespace):
// tenant=X names tenant X's, the default tenant's without it.
func (s *Server) stateRoutes(mux *http.ServeMux) {
	mux.Handle("GET /v1/plugins/{name}/state", s.adminFunc(s.getState))
	mux.Handle("DELETE /v1/plugins/{name}/state", s.adminFunc(s.deleteState))
}

// stateEntryView is a key as the API shows it: text as it is, other bytes
// in base64 (value_base64).
type stateEntryView struct {
	Key         string     `json:"key"`
	Value       *string    `json:"value,omitempty"`
	ValueBase64 string     `json:"value_base64,omitempty"`
	Expires     *time.Time `json:"expires_at,omitempty"`
}

func (s *Server) getState(w http.ResponseWriter, r *http.Request) {
	plugin, q := r.PathValue("name"), r.URL.Query()
	if !q.Has("type") && !q.Has("namespace") {
		s.getStateNamespaces(w, r, plugin)
		return
	}
	limit, err := queryInt(r, "limit", 100, maxList)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ns := s.namespaceOf(plugin, q)
	entries, next, err := s.engine.StateKeys(ns, []byte(q.Get("prefix")), q.Get("cursor"), limit)
	if err == nil && len(entries) == 0 && q.Get("cursor") == "" {
		err = s.unknownPlugin(plugin) // a typo with -type said "no keys" (a new user's trial)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := map[string]any{"plugin": plugin, "namespace": ns}
	if next != "" {
		out["next_cursor"] = next
	}
	out["keys"] = viewStateEntries(entries)
	writeJSON(w, http.StatusOK, out)
}

// getStateNamespaces lists the plugin's namespaces with their usage.
func (s *Server) getStateNamespaces(w http.ResponseWriter, r *http.Request, plugin string) {
	nss, err := s.engine.StateNamespaces(plugin)
	if err == nil && len(nss) == 0 {
		err = s.unknownPlugin(plugin)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	views := []map[string]any{}
	for _, ns := range nss {
		v := map[string]any{"namespace": ns.Name, "tenant": ns.Tenant, "keys": ns.Keys, "bytes": ns.Bytes}
		if ns.Shared {
			v["shared"] = true
		} else {
			v["type"] = ns.Queue
		}
		views = append(views, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugin": plugin, "namespaces": views})
}

// unknownPlugin is the not found of a plugin name that is neither loaded
// nor keeps any state: a name mistyped is not a plugin without state (a
// removed plugin's state is still listed while it lasts).
func (s *Server) unknownPlugin(plugin string) error {
	if s.engine.PluginLoaded(plugin) {
		return nil
	}
	nss, err := s.engine.StateNamespaces(plugin)
	if err != nil || len(nss) > 0 {
		return err
	}
	return switchyard.Errorf(switchyard.ENOTFOUND, "no plugin %q is loaded, and no state is kept under that name", plugin)
}

func viewStateEntries(entries []storage.StateEntry) []stateEntryView {
	views := make([]stateEntryView, len(entries))
	for i, e := range entries {
		v := stateEntryView{Key: string(e.Key)}
		if IsText(e.Value) {
			val := string(e.Value)
			v.Value = &val
		} else {
			v.ValueBase64 = base64.StdEncoding.EncodeToString(e.Value)
		}
		if !e.Expires.IsZero() {
			v.Expires = &e.Expires
		}
		views[i] = v
	}
	return views
}

func (s *Server) deleteState(w http.ResponseWriter, r *http.Request) {
	plugin, q := r.PathValue("name"), r.URL.Query()
	if !q.Has("type") && !q.Has("namespace") || q.Has("key") == q.Has("prefix") {
		s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "name the namespace with type= (or namespace=) and what to delete with key= or prefix= (prefix= with nothing after it: every key)"))
		return
	}
	ns := s.namespaceOf(plugin, q)
	if q.Has("key") {
		found, err := s.engine.DeleteStateKey(r.Context(), ns, []byte(q.Get("key")))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !found {
			s.writeError(w, r, switchyard.Errorf(switchyard.ENOTFOUND, "plugin %q has no key %q in namespace %q", plugin, q.Get("key"), ns))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"deleted": 1})
		return
	}
	n, err := s.engine.DeleteState(r.Context(), ns, []byte(q.Get("prefix")))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": n})
}

// IsText says whether b reads as text — UTF-8 without control characters
// other than tab and newline — and can be shown as it is; other bytes are
// shown in base64.
func IsText(b []byte) bool {
	return utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' || r == 0x7f })
}

// namespaceOf is the namespace a state request names: the shared
// namespace=N, or the plugin's namespace on type=T; of tenant=X (default:
// the default tenant). A namespace as the listing names it is taken as
// it is.
func (s *Server) namespaceOf(plugin string, q url.Values) string {
	if q.Has("namespace") {
		return storage.TenantNamespace(q.Get("tenant"), q.Get("namespace"))
	}
	return s.engine.StateNamespaceOf(plugin, q.Get("type"), q.Get("tenant"))
}
