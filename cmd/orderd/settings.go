package main

import "github.com/orderly/orderly/internal/flagenv"

// settings names orderd's flags in its configuration and start-up errors
// with their environment variables; ParseConfig records the flags.
var settings = flagenv.NewNamer("ORDERD")

// nameSettings returns err with every orderd flag its message mentions
// followed by its environment variable, so that a start-up or configuration
// error says what to change however orderd is configured (flagenv.Namer).
func nameSettings(err error) error { return settings.Name(err) }
