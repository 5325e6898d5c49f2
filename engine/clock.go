package engine

import (
	"sync"
	"time"
)

// steadyClock is the engine's clock: the wall clock's, except that it never
// goes back. Due times are wall-clock times (an event's next attempt is its
// key in the queue), so a step of the wall clock backwards (an NTP
// correction, a VM restored from a snapshot, an edge node's clock set at
// boot) would leave every event stored before it not due until the clock
// caught up again, an hour for a step of an hour, and with ordering =
// "key" every later event of the same keys behind them (a review).
//
// So the clock goes on from its last reading by the time that has passed
// since, as the monotonic clock measures it (which no step of the wall
// clock moves), and takes the wall clock's reading whenever that is ahead:
// a step forward passes as it is (what was waiting comes due sooner), a
// step back is ridden out at the clock's rate, and once the wall clock is
// put right again (a step forward of the same size) the two agree. Across
// a restart the monotonic clock tells nothing; the data file keeps the
// last time the clock reached (storage.DB.ClockMark), and a router that
// starts with its wall clock behind it goes on from there
// (docs/architecture.md, "A clock stepped back").
type steadyClock struct {
	wall func() time.Time
	// seen, when set, is told each time the clock gives (the data file
	// keeps the last: storage.DB.SeeTime).
	seen func(time.Time)
	mu   sync.Mutex
	last time.Time // the last time given, without a monotonic reading
	read time.Time // the wall clock's reading it came from (zero before the first)
}

// newSteadyClock is a clock over wall that gives no time before from (the
// time the data file last saw, or zero).
func newSteadyClock(wall func() time.Time, from time.Time, seen func(time.Time)) *steadyClock {
	return &steadyClock{wall: wall, seen: seen, last: from.Round(0)}
}

func (c *steadyClock) now() time.Time {
	// Under the lock, or a caller that read the clock earlier but locks
	// later would look like a step back, and the clock would run ahead
	// with every such race (a review: 2 s ahead after 1.6 million calls
	// from 8 goroutines).
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.wall()
	t := c.at(w)
	c.last, c.read = t, w
	if c.seen != nil {
		c.seen(t)
	}
	return t
}

// at is the clock's time at the wall clock's reading w: the last time
// given and what has passed since, unless the wall clock is ahead of that.
// The wall clock's reading is compared without its monotonic one: Before
// compares those when both times have one, and they never go back, so a
// real step of the wall clock went unseen (a review).
func (c *steadyClock) at(w time.Time) time.Time {
	steady := c.last
	if !c.read.IsZero() {
		steady = steady.Add(max(w.Sub(c.read), 0)) // monotonic where both readings have one
	}
	return laterOf(w.Round(0), steady)
}

// ahead is how far the clock is ahead of the wall clock.
func (c *steadyClock) ahead() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.wall()
	return c.at(w).Sub(w.Round(0))
}

func laterOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// ClockKeeper is a store that keeps the engine's clock across restarts
// (storage.DB): the time it last saw, and a way to tell it the time.
type ClockKeeper interface {
	ClockMark() time.Time
	SeeTime(time.Time)
}

// clockFor is the engine's clock over wall, starting no earlier than the
// time store last saw when it keeps one.
func clockFor(store Store, wall func() time.Time) *steadyClock {
	if k, ok := store.(ClockKeeper); ok {
		return newSteadyClock(wall, k.ClockMark(), k.SeeTime)
	}
	return newSteadyClock(wall, time.Time{}, nil)
}

// sayClockAhead warns when the engine's clock starts ahead of the wall
// clock: the data file saw a later time than the system now says. The
// engine's times (due times, expiries, the ones the API shows) stay ahead
// by that much until the wall clock passes it.
func (e *Engine) sayClockAhead() {
	now := e.now()
	if ahead := e.clock.ahead(); ahead >= clockNotable {
		e.log.Warn("the system clock is behind the time this data file last saw: the router's clock goes on from that time at the clock's rate until the system clock passes it (docs/architecture.md, \"A clock stepped back\"); "+
			"if that time is the wrong one (a clock once set far ahead), let the backlog drain, stop the router and run `router db clock -forget` on the data file",
			"behind", ahead.Round(time.Second).String(), "router_clock", now.UTC().Format(time.RFC3339))
	}
}

// clockNotable is the least gap between the engine's clock and the wall
// clock that is said (the mark lags the last commit by up to a second).
const clockNotable = 2 * time.Second
