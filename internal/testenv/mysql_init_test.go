package testenv

import (
	"context"
	"os"
	"sync"
	"testing"
)

// TestMariaDBInitsInParallel: datadirs initialised at once, as parallel
// test processes that each start a server do, all succeed. Their
// temporary files shared /tmp, and about one initialisation in five of
// eight at once failed ("Could not remove temporary table").
func TestMariaDBInitsInParallel(t *testing.T) {
	paths, err := lookPaths("mariadb-install-db")
	if err != nil {
		t.Skipf("no MariaDB to initialise: %v", err)
	}
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*mysqlInitTimeout)
	defer cancel()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		dir := t.TempDir()
		wg.Go(func() { errs[i] = initMariaDB(ctx, paths[0], dir, asRoot) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("initialisation %d of %d at once: %v", i+1, n, err)
		}
	}
}
