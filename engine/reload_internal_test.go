package engine

import "testing"

// snake spells Go field names as the configuration's attributes.
func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"Socket": "socket", "HTTP": "http", "TokensFile": "tokens_file", "MaxConnections": "max_connections",
		"ReadTimeout": "read_timeout", "MinFree": "min_free", "URL": "url", "TLSConfig": "tls_config",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
