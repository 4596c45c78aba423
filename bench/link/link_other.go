//go:build !linux

package link

import (
	"context"
	"errors"
	"net"
	"runtime"
)

// linkSys is empty here: there is never a shaped link to manage.
type linkSys struct{}

// setup cannot build a shaped link here: network namespaces, veth pairs
// and tc are Linux's.
func (l *Link) setup(context.Context) error {
	return errors.New("an emulated link needs Linux network namespaces and tc; this is " + runtime.GOOS)
}

// teardown has nothing to remove: setup never succeeds here.
func (l *Link) teardown(context.Context) error { return l.sys.teardown() }

func (linkSys) teardown() error { return nil }

// listenNetns is never reached: without a namespace the link is loopback.
func (l *Link) listenNetns(context.Context, string) (net.Listener, error) {
	return nil, errors.New("bench: network namespaces need Linux")
}
