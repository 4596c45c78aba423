//go:build !linux

package main

import "syscall"

// nodeProcAttr: elsewhere than Linux nothing stops a node when "cluster
// up" dies; stop "cluster up" with SIGINT, which stops its nodes.
func nodeProcAttr() *syscall.SysProcAttr { return nil }
