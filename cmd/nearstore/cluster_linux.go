package main

import "syscall"

// nodeProcAttr has the kernel send SIGTERM to a node "cluster up"
// started when "cluster up" dies, even by kill -9, so a local cluster
// never leaves orphan nodes behind; SIGTERM stops a node cleanly.
func nodeProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
