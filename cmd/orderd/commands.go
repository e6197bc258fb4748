package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/intake"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/service"
)

// startCommands connects to c.CommandsNATSURL, ensures the commands stream
// and consumes commands until ctx is done; stop waits for the consumer to
// drain (messages in flight finish and are acknowledged) and disconnects.
func startCommands(ctx context.Context, c Config, svc *service.Service, apiCfg api.Config, log *slog.Logger) (stop func(), err error) {
	nc, err := nats.Connect(c.CommandsNATSURL, nats.Name("orderd"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("-commands-nats-url: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := natsbus.EnsureStream(sctx, js, c.CommandsStream, c.CommandsRoot, c.CommandsDuplicateWindow); err != nil {
		nc.Close()
		return nil, fmt.Errorf("commands stream %s: %w", c.CommandsStream, err)
	}
	cons := natsbus.New(js, svc, natsbus.Config{
		Root: c.CommandsRoot, Stream: c.CommandsStream, Durable: c.CommandsDurable, Logger: log,
		APIKeys: c.APIKeys, SignatureTolerance: c.CommandsSignatureTolerance,
		Decoder: intake.Decoder{Policy: apiCfg.Policy, Fingerprinter: apiCfg.Fingerprinter},
		Gate:    apiCfg.Gate, RequestTimeout: c.RequestTimeout,
		AckWait: c.LeaseDuration + c.RequestTimeout,
	})
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := cons.Run(cctx); err != nil {
			log.Error("command consumer stopped", "err", err)
		}
	}()
	log.Info("consuming commands", "stream", c.CommandsStream, "consumer", c.CommandsDurable)
	return func() { ccancel(); <-done; nc.Close() }, nil
}
