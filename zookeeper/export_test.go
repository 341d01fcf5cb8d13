package zookeeper

// Hooks for the external tests.

// ParentPath is the parent node of the lock queue of a store key under root.
func ParentPath(root, key string) string { return root + "/" + escapeKey(key) }

// ErrConnClosed is the cause of the locks lost when the connection closes.
var ErrConnClosed = errConnClosed

// GrantedTimeout is grantedTimeout, for TestGrantedSessionTimeout.
var GrantedTimeout = grantedTimeout
