package backoff

import (
	"context"
	"testing"
	"time"
)

// The delay starts at Min, doubles, and stays at Max.
func TestDoubling(t *testing.T) {
	b := Doubling{Min: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	d := time.Duration(0)
	for range 5 {
		d = b.Next(d)
		got = append(got, d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
}

// Sleep waits the full time, or returns false as soon as its context ends.
func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a full sleep reported cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) || time.Since(start) > time.Second {
		t.Fatal("a cancelled sleep did not return at once with false")
	}
}
