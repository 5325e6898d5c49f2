package api

import (
	"io/fs"
	"net/http"
	"strings"

	"github.com/switchyard-router/switchyard"

	"github.com/switchyard-router/switchyard/api/console"
)

// consolePath is where the operator console's files are served.
const consolePath = "/ui/"

// consoleRoutes serves the console (api/console) at /ui/. The files are
// public — they hold nothing secret, and a browser must load them before
// it can ask for a token — while everything they show comes from the
// admin routes, with the operator's bearer token.
func (s *Server) consoleRoutes(mux *http.ServeMux) {
	fsys := console.FS()
	files := http.StripPrefix(consolePath, http.FileServerFS(fsys))
	mux.Handle("GET "+consolePath, consoleHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A file the console does not have is the API's 404 problem, not
		// the file server's text.
		if name := strings.TrimPrefix(r.URL.Path, consolePath); name != "" {
			if _, err := fs.Stat(fsys, name); err != nil {
				s.writeError(w, r, switchyard.Errorf(switchyard.ENOTFOUND, "the console has no file %q", name))
				return
			}
		}
		files.ServeHTTP(w, r)
	})))
	mux.Handle("GET /ui", http.RedirectHandler(consolePath, http.StatusMovedPermanently))
}

// isConsoleFile reports a request for one of the console's files.
func isConsoleFile(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, consolePath))
}

// consoleHeaders keeps the pages to their own scripts and to this origin:
// no inline script, no other site's, no framing, no referrer.
func consoleHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
