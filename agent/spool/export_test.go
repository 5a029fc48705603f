package spool

// SetCrashHook makes Rebase call f at each of its steps ("written",
// "renamed", "state").
func (s *Spool) SetCrashHook(f func(step string)) { s.crash = f }
