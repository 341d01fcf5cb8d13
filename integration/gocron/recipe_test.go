package gocron_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/gocronlock"
	"github.com/golocker/locker/integration/internal/storeurl"
	"github.com/golocker/locker/memory"
)

// recipeTTL is the TTL of the README's quick start.
const recipeTTL = 10 * time.Second

// readmeRecipe returns the MinHold of the README's cron recipe, and checks
// that its quick start still sets recipeTTL.
func readmeRecipe(t *testing.T) time.Duration {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "locker.WithTTL(10*time.Second)") {
		t.Fatal("the README's quick start no longer sets locker.WithTTL(10*time.Second): update recipeTTL")
	}
	m := regexp.MustCompile(`gocronlock\.NewLocker\(l, gocronlock\.MinHold\((\d+)\*time\.Second\)\)`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("the README has no gocronlock.NewLocker(l, gocronlock.MinHold(N*time.Second)): update this test")
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(n) * time.Second
}

// recipeRun is one subtest of a recipe test: a ctx and the replicas'
// Lockers on b, with the README's TTL.
func recipeRun(t *testing.T, b storeurl.Backend, mem *memory.Store) (context.Context, []locker.Locker) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx, lockersTTL(t, b, mem, recipeTTL)
}

// TestREADMECronRecipe runs the README's cron recipe as written on every
// backend: NewLocker accepts it, and of three replicas whose tick comes at
// once exactly one runs the job; a replica whose tick comes after the job
// ended skips it (the MinHold).
func TestREADMECronRecipe(t *testing.T) {
	recipeMinHold := readmeRecipe(t)
	mem := memory.NewStore()
	for _, b := range backendsUnderTest {
		t.Run(b.Name, func(t *testing.T) {
			ctx, ls := recipeRun(t, b, mem)
			job := "report-" + strings.ReplaceAll(t.Name(), "/", "_") + "-" + rand.Text()
			ran := 0
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i, l := range ls {
				jl, err := gocronlock.NewLocker(l, gocronlock.MinHold(recipeMinHold))
				if err != nil {
					t.Fatalf("the README's recipe on %s: NewLocker: %v", b.Name, err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					lk, err := jl.Lock(ctx, job)
					if err != nil {
						return // skipped: another replica runs it
					}
					mu.Lock()
					ran++
					mu.Unlock()
					if err := lk.Unlock(ctx); err != nil {
						t.Errorf("replica %d: Unlock: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if ran != 1 {
				t.Fatalf("the README's recipe on %s: the tick ran on %d replicas, want exactly 1", b.Name, ran)
			}
			late, err := gocronlock.NewLocker(ls[0], gocronlock.MinHold(recipeMinHold))
			if err != nil {
				t.Fatal(err)
			}
			if lk, err := late.Lock(ctx, job); err == nil {
				_ = lk.Unlock(ctx)
				t.Errorf("the README's recipe on %s: a late replica ran the tick again within the MinHold", b.Name)
			}
		})
	}
}

// TestMinHoldOverTTL: a MinHold longer than the TTL (a job every minute
// with the README's TTL) works on every backend but ZooKeeper, whose TTL
// is its session timeout; there NewLocker refuses it, naming MinHold, the
// TTL and WithTTL.
func TestMinHoldOverTTL(t *testing.T) {
	const minHold = 55 * time.Second
	mem := memory.NewStore()
	for _, b := range backendsUnderTest {
		t.Run(b.Name, func(t *testing.T) {
			ctx, ls := recipeRun(t, b, mem)
			jl, err := gocronlock.NewLocker(ls[0], gocronlock.MinHold(minHold))
			if b.Name == "zookeeper" {
				if !errors.Is(err, locker.ErrInvalidOption) {
					t.Fatalf("NewLocker with MinHold %v over a TTL of %v on ZooKeeper: %v; want an error matching ErrInvalidOption", minHold, recipeTTL, err)
				}
				for _, want := range []string{"MinHold", minHold.String(), recipeTTL.String(), "WithTTL"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("NewLocker's error %q does not name %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("NewLocker with MinHold %v over a TTL of %v on %s: %v", minHold, recipeTTL, b.Name, err)
			}
			job := "minute-" + strings.ReplaceAll(t.Name(), "/", "_") + "-" + rand.Text()
			lk, err := jl.Lock(ctx, job)
			if err != nil {
				t.Fatalf("a run with MinHold %v over a TTL of %v on %s: %v", minHold, recipeTTL, b.Name, err)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			other, err := gocronlock.NewLocker(ls[1], gocronlock.MinHold(minHold))
			if err != nil {
				t.Fatal(err)
			}
			if lk, err := other.Lock(ctx, job); err == nil {
				_ = lk.Unlock(ctx)
				t.Errorf("on %s another replica ran the job within its MinHold", b.Name)
			}
		})
	}
}
