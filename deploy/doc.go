// Package deploy holds toolsentry's deployment files: nats-server
// configurations (a single node, a 3-node JetStream cluster, accounts and
// permissions), a compose file, Kubernetes manifests, Helm values for the
// official NATS chart, a systemd unit and the worker's Dockerfile. See
// README.md. It has no Go code: its test parses every nats-server
// configuration with nats-server's own parser and every YAML file, so that
// the files cannot rot unnoticed.
package deploy
