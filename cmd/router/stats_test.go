package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// routerStats is the part of GET /v1/stats the tests read.
type routerStats struct {
	Types []struct {
		Type      string `json:"type"`
		Pending   int    `json:"pending"`
		InProcess int    `json:"in_process"`
	} `json:"types"`
	Storage map[string]int64 `json:"storage"`
}

// fetchStats is one GET /v1/stats through c (a client of the router's
// socket).
func fetchStats(c *http.Client) (*routerStats, error) {
	resp, err := c.Get("http://router/v1/stats")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/stats: %s", resp.Status)
	}
	st := new(routerStats)
	if err := json.NewDecoder(resp.Body).Decode(st); err != nil {
		return nil, fmt.Errorf("GET /v1/stats: %w", err)
	}
	return st, nil
}

// waiting is how many events of typ (an event type or an inbox's queue,
// "inbox:name"; "" for every one) are pending and in process; known is
// false when the router lists no such type.
func (s *routerStats) waiting(typ string) (pending, inProcess int, known bool) {
	for _, ty := range s.Types {
		if typ == "" || ty.Type == typ {
			pending, inProcess, known = pending+ty.Pending, inProcess+ty.InProcess, true
		}
	}
	return pending, inProcess, known
}

// waitDrained waits up to within until typ ("" for every type) has
// nothing pending or in process, and fails the test, saying when and with
// the last stats, if it does not. A type the router does not list yet has
// not drained: it stored nothing.
func waitDrained(t *testing.T, c *http.Client, typ, when string, within time.Duration) {
	t.Helper()
	var (
		st  *routerStats
		err error
	)
	testkit.EventuallyWith(t, within, func() bool {
		if st, err = fetchStats(c); err != nil {
			return false
		}
		pending, inProcess, known := st.waiting(typ)
		return known && pending == 0 && inProcess == 0
	}, func() string {
		if err != nil {
			return fmt.Sprintf("%s: %q not drained: %v", when, typ, err)
		}
		pending, inProcess, known := st.waiting(typ)
		return fmt.Sprintf("%s: %q not drained (listed %v): %d pending, %d in process; storage %v", when, typ, known, pending, inProcess, st.Storage)
	})
}
