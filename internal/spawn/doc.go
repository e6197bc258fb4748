// Package spawn builds Orderly's commands and runs them as child processes
// that it owns: the one process spawner of the tests (through
// internal/proctest) and of orderstorm's -spawn mode.
//
// A process started with [Start] must log a JSON line
// {"msg":"listening","addr":"host:port"} on stderr once it listens; Start
// returns when it has. A [Process] can be stopped (SIGTERM), killed
// (SIGKILL) and restarted on the address it had, and only ever signals the
// process it started.
package spawn
