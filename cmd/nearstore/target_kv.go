package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nearstore/nearstore/kv/leed"
	"github.com/nearstore/nearstore/target"
	"github.com/nearstore/nearstore/volume"
)

// openKVNamespace opens the volume of a --kv-namespace and LEED's store on
// it (formatting a volume that holds none), with a token engine whose cost
// curve is the simulated device's model for sim volumes and the NAND
// model's for others. It returns the namespace and what closes both.
func openKVNamespace(ctx context.Context, spec string, log *slog.Logger) (target.NamespaceConfig, func(), error) {
	v, err := volume.Open(spec)
	if err != nil {
		return target.NamespaceConfig{}, nil, err
	}
	p := volume.NANDParams()
	if strings.HasPrefix(spec, "sim:optane:") {
		p = volume.OptaneParams()
	}
	curve, capacity := leed.CurveFor(leed.DeviceModel{ReadLatency: p.ReadLatency, WriteLatency: p.WriteLatency, IOPS: p.IOPS, Bandwidth: p.Bandwidth})
	eng, err := leed.NewEngine(curve, capacity)
	if err != nil {
		v.Close()
		return target.NamespaceConfig{}, nil, err
	}
	st, err := leed.Open(ctx, v, leed.Options{Create: true, Engine: eng, Logger: log})
	if err != nil {
		v.Close()
		return target.NamespaceConfig{}, nil, fmt.Errorf("--kv-namespace %s: %w", spec, err)
	}
	s := st.Stats()
	log.Info("kv namespace", "spec", spec, "size", volume.FormatSize(v.Size()), "objects", s.Objects, "segments", s.Segments, "max_value", s.MaxValueSize)
	closeAll := func() {
		if err := st.Close(); err != nil {
			log.Error("kv namespace close", "spec", spec, "err", err)
		}
		v.Close()
	}
	return target.NamespaceConfig{Backend: v, Name: "kv:" + spec, KV: &leed.Namespace{DB: st, Engine: eng}}, closeAll, nil
}
