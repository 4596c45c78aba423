package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics serves a new registry, with the Go runtime's and the
// process's collectors, at http://addr/metrics until stop is called. The
// caller registers its own metrics in reg.
func serveMetrics(addr string, log *slog.Logger) (reg *prometheus.Registry, stop func(), err error) {
	reg = prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics listener: %w", err)
	}
	h := http.NewServeMux()
	h.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return reg, func() { _ = srv.Close() }, nil
}
