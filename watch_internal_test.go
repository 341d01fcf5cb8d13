package locker

import (
	"context"
	"sync"
	"testing"
	"time"
)

// scripted is an Inspector that answers from a script, then repeats its
// last answer.
type scripted struct {
	mu    sync.Mutex
	steps []Status
	reads int
}

func (s *scripted) Inspect(context.Context, string) (Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	st := s.steps[0]
	if len(s.steps) > 1 {
		s.steps = s.steps[1:]
	}
	return st, nil
}

// TestWatchLoopOrder: a read that shows a lower token than one already
// reported (a lagging replica) is not reported; nobody and higher tokens
// are, once each.
func TestWatchLoopOrder(t *testing.T) {
	ins := &scripted{steps: []Status{
		{Held: true, Token: 2}, {Held: true, Token: 2}, {Held: true, Token: 1},
		{}, {Held: true, Token: 1}, {Held: true, Token: 3},
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []Status
	watchLoop(ctx, ins, "k", time.Millisecond, nil, nil, func(st Status, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, st)
		return len(got) < 3
	})
	want := []Status{{Held: true, Token: 2}, {}, {Held: true, Token: 3}}
	if len(got) != len(want) {
		t.Fatalf("reported %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i].Held != want[i].Held || got[i].Token != want[i].Token {
			t.Errorf("report %d = %+v; want %+v", i, got[i], want[i])
		}
	}
}

// TestWatchLoopShared: a shared key's holders are followed as a set, and
// the newest holder leaving before an older one is reported.
func TestWatchLoopShared(t *testing.T) {
	two := Status{Held: true, Token: 7, Holders: []Holder{{Token: 5}, {Token: 7}}}
	ins := &scripted{steps: []Status{
		two, {Held: true, Token: 7, Holders: []Holder{{Token: 7}, {Token: 5}}},
		{Held: true, Token: 5, Holders: []Holder{{Token: 5}}},
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []Status
	watchLoop(ctx, ins, "k", time.Millisecond, nil, nil, func(st Status, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, st)
		return len(got) < 2
	})
	if len(got) != 2 || len(got[0].Holders) != 2 || got[1].Token != 5 || len(got[1].Holders) != 1 {
		t.Errorf("reported %+v; want the two holders, then holder 5 alone", got)
	}
}

// TestWatchLoopNotified: a notification reads the store at once, however
// long the poll interval.
func TestWatchLoopNotified(t *testing.T) {
	ins := &scripted{steps: []Status{{Held: true, Token: 1}, {}}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	notify := make(chan struct{}, 1)
	n := 0
	watchLoop(ctx, ins, "k", time.Hour, notify, nil, func(st Status, err error) bool {
		n++
		if n == 1 {
			notify <- struct{}{}
			return true
		}
		if st.Held || err != nil {
			t.Errorf("after the notification: %+v, %v; want nobody", st, err)
		}
		return false
	})
	if n != 2 {
		t.Errorf("reported %d times before the ctx ended; want 2 (the notification was not read)", n)
	}
}
