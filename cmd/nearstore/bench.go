package main

import "github.com/spf13/cobra"

func newBenchCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Reproducible benchmarks that run nearstore and a baseline side by side"}
	return cmd
}
