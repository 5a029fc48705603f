package main

import "syscall"

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit and returns
// the new soft limit.
func raiseNoFile() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return 0, err
		}
	}
	return r.Cur, nil
}
