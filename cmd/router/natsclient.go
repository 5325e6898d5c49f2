package main

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	natsgo "github.com/nats-io/nats.go"

	"github.com/switchyard-router/switchyard/config"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
)

// connectNATS connects to the server of the nats block name (the first one
// when name is "") of the config at path, with that block's credentials (for an embedded server, the
// password file the router generated): how `router bench -e2e` and the
// tests watch what the router publishes. url, when set, overrides the
// address the config gives (needed for an embedded server on port -1).
func connectNATS(path, name, url string, opts ...natsgo.Option) (*natsgo.Conn, error) {
	cfg, err := loadConfig(path, true)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(cfg.NATS, func(n config.NATS) bool { return name == "" || n.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("%s declares no nats block %q", cfg.File, name)
	}
	n := cfg.NATS[i]
	if url == "" {
		url = n.URL
		if n.Embedded {
			url = "nats://" + net.JoinHostPort(n.Host, strconv.Itoa(n.Port))
		}
	}
	auth, err := natsplugin.ClientOptions(n, nil)
	if err != nil {
		return nil, fmt.Errorf("nats %q: %w", n.Name, err)
	}
	nc, err := natsgo.Connect(url, append(auth, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("nats %q: connect %s: %w", n.Name, url, err)
	}
	return nc, nil
}
