package secreturl

import "testing"

// TestSettledPgxRefusal: pgx's refusal of the closed port and an open that
// outlasted its deadline settle alike (CI: TestNoPasswordInErrors/Open/postgres
// under load), and a mangled word in the refusal still shows.
func TestSettledPgxRefusal(t *testing.T) {
	const (
		refused   = "locker: open postgres: postgres postgres://u:xxxxx@127.0.0.1:23505: failed to connect to `user=u database=`:; \t127.0.0.1:23505 (127.0.0.1): dial error: dial tcp 127.0.0.1:23505: connect: connection refused; \t127.0.0.1:23505 (127.0.0.1): dial error: dial tcp 127.0.0.1:23505: connect: connection refused"
		lines     = "postgres postgresql://u:xxxxx@127.0.0.1:28056: failed to connect to `user=u database=`:\n\t127.0.0.1:28056 (127.0.0.1): dial error: dial tcp 127.0.0.1:28056: connect: connection refused\n\t127.0.0.1:28056 (127.0.0.1): dial error: dial tcp 127.0.0.1:28056: connect: connection refused"
		linesLate = "postgres postgresql://u:xxxxx@127.0.0.1:28056: context deadline exceeded"
		late      = "locker: open postgres: postgres postgres://u:xxxxx@127.0.0.1:23505: context deadline exceeded"
		mangled   = "locker: open postgres: postgres postgres://u:xxxxx@127.0.0.1:23505: failed to connect to `user=u database=`:; \t127.0.0.1:23505 (127.0.0.1): dial error: xxxxx tcp 127.0.0.1:23505: connect: connection refused"
	)
	if a, b := settled(refused), settled(late); a != b {
		t.Errorf("a refusal and a late open must settle alike:\n%s\n%s", a, b)
	}
	if a, b := settled(lines), settled(linesLate); a != b {
		t.Errorf("pgx's refusal a line per attempt (postgres.Open's) and a late open must settle alike:\n%s\n%s", a, b)
	}
	if a, b := settled(mangled), settled(late); a == b {
		t.Errorf("a mangled refusal must not settle as a late open: %s", a)
	}
}
