package main

import (
	_ "github.com/cloudevents/sdk-go/v2/event"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/gowebpki/jcs"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats-server/v2/test"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/nats-io/nkeys"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/rs/zerolog"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/sourcegraph/conc/pool"
	_ "github.com/synadia-io/orbit.go/pcgroups"
)
