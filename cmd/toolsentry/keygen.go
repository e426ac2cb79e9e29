package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/publisher"
)

// envSigningKey names the seed file of serve --signing-key and keygen --out.
const envSigningKey = "TOOLSENTRY_SIGNING_KEY"

// defaultSigningKeyFile is where keygen writes the seed by default: in
// the user's configuration directory, never in the working directory,
// which is often a clone of a repository the seed must not be committed to
// (*.nk is git-ignored in this one all the same).
func defaultSigningKeyFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", usageErrorf("keygen: no default for --out (%v): give --out FILE", err)
	}
	return filepath.Join(dir, "toolsentry", "signing.nk"), nil
}

// defaultSigningKeyHelp is how the help texts name that default.
const defaultSigningKeyHelp = "$XDG_CONFIG_HOME/toolsentry/signing.nk, ~/.config/toolsentry/signing.nk if unset"

func init() {
	register(&command{
		name:    "keygen",
		summary: "create an ed25519 key pair (NATS nkeys) for signing verdicts",
		usage: `Usage: toolsentry keygen [flags]

Creates an ed25519 key pair for signed verdicts, in the NATS nkeys format:
a seed (SN..., the secret that ` + "`toolsentry serve --signing-key`" + ` signs with)
and its public key (N..., what ` + "`toolsentry verify --pubkey`" + ` trusts; every
signature names it as its key id). Writes the seed to --out with
permissions 0600, the public key to --out with ".pub" appended (0644), and
prints the public key on standard output. Refuses to overwrite either file
unless --force.

The key is an nkeys server-type key: it identifies the toolsentry service
that issued a verdict and is no NATS credential. User keys (SU/U) log in to
NATS and account or operator keys (SA/SO) issue NATS JWTs, so serve refuses
them as signing keys (and NATS refuses a server key as a login): a leaked
credential cannot sign verdicts and a leaked signing key opens no NATS
connection. Keep the seed secret; publish the public key to your auditors.

Flags (each also read from the environment variable shown):
  --out FILE    where to write the seed (TOOLSENTRY_SIGNING_KEY, default
                ` + defaultSigningKeyHelp + `;
                its directory is created 0700); the public key goes to FILE.pub
  --force       overwrite existing files (default false)

Example:
  toolsentry keygen --out /etc/toolsentry/signing.nk
  toolsentry serve --signing-key /etc/toolsentry/signing.nk
  toolsentry verify --pubkey /etc/toolsentry/signing.nk.pub
`,
		run: runKeygen,
	})
}

func runKeygen(_ context.Context, args []string, sio stdio) error {
	fset := flag.NewFlagSet("keygen", flag.ContinueOnError)
	out := fset.String("out", "", "")
	bindEnv(fset, "out", envSigningKey)
	force := fset.Bool("force", false, "")
	rest, err := parseInterleaved(fset, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("keygen takes no arguments, got %q", rest)
	}
	if *out == "" {
		if *out, err = defaultSigningKeyFile(); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(*out), 0o700); err != nil {
			return fmt.Errorf("creating the directory of the default --out: %w", err)
		}
	}
	seed, public, err := publisher.GenerateSigningKey()
	if err != nil {
		return err
	}
	defer clear(seed)
	pubPath := *out + ".pub"
	if !*force {
		for _, p := range []string{*out, pubPath} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s exists: keygen does not overwrite a key (use --force, or another --out)", p)
			}
		}
	}
	if err := writeKeyFile(*out, append(seed, '\n'), 0o600, *force); err != nil {
		return err
	}
	if err := writeKeyFile(pubPath, []byte(public+"\n"), 0o644, *force); err != nil {
		return err
	}
	fmt.Fprintf(sio.err, "wrote the signing seed to %s (keep it secret) and the public key to %s\n", *out, pubPath)
	_, err = fmt.Fprintln(sio.out, public)
	return err
}

// writeKeyFile writes a key file with mode perm: a new file, or with force
// an existing one, whose permissions are then set to perm as well.
func writeKeyFile(path string, data []byte, perm fs.FileMode, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, perm)
	if err != nil {
		return fmt.Errorf("writing key: %w", err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("writing key: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing key %s: %w", path, err)
	}
	return nil
}

// loadServeSigner loads serve's --signing-key: nil (unsigned verdicts) for
// an empty path. It warns when the seed is readable by others.
func loadServeSigner(ctx context.Context, path string) (consumer.Signer, error) {
	if path == "" {
		return nil, nil
	}
	s, err := publisher.LoadSigner(path)
	if err != nil {
		if errors.Is(err, publisher.ErrBadSigningKey) {
			return nil, usageErrorf("--signing-key %v", err)
		}
		return nil, fmt.Errorf("--signing-key: %w", err)
	}
	log := zerolog.Ctx(ctx)
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn().Str("file", path).Str("mode", st.Mode().Perm().String()).Msg("the signing seed is readable by other users: chmod 600 it")
	}
	log.Info().Str("public_key", s.PublicKey()).Msg("signing verdicts")
	return s, nil
}
