package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeygenDefaultIsOutsideTheWorkingDirectory runs keygen without --out
// in a directory standing for a clone: the seed goes to the user's
// configuration directory (0700), nothing into the working directory.
func TestKeygenDefaultIsOutsideTheWorkingDirectory(t *testing.T) {
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("HOME", t.TempDir())
	t.Setenv(envSigningKey, "")
	work := t.TempDir()
	t.Chdir(work)
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "keygen")
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errOut)
	}
	seed := filepath.Join(config, "toolsentry", "signing.nk")
	st, err := os.Stat(seed)
	if err != nil {
		t.Fatalf("the default seed: %v (stderr %q)", err, errOut)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("seed mode %s, want 0600", st.Mode().Perm())
	}
	if dir, err := os.Stat(filepath.Dir(seed)); err != nil || dir.Mode().Perm() != 0o700 {
		t.Errorf("seed directory: %v, mode %v; want 0700", err, dir.Mode().Perm())
	}
	if _, err := os.Stat(seed + ".pub"); err != nil {
		t.Errorf("public key: %v", err)
	}
	if !strings.HasPrefix(strings.TrimSpace(out), "N") {
		t.Errorf("keygen printed %q, want the public key", out)
	}
	if entries, _ := os.ReadDir(work); len(entries) > 0 {
		t.Errorf("keygen wrote %d files into the working directory", len(entries))
	}
}

// TestSigningSeedsAreGitIgnored: a seed written into this clone by hand
// (--out signing.nk, as the README does) cannot be committed by mistake;
// its public key can.
func TestSigningSeedsAreGitIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed: cannot check .gitignore")
	}
	root := filepath.Join("..", "..")
	if err := exec.Command(git, "-C", root, "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skipf("not in a git work tree (%v)", err)
	}
	for path, ignored := range map[string]bool{"signing.nk": true, "toolsentry-signing.nk": true, "keys/prod.nk": true, "signing.nk.pub": false} {
		err := exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", path).Run()
		if got := err == nil; got != ignored {
			t.Errorf("git check-ignore %s: ignored=%v, want %v (%v)", path, got, ignored, err)
		}
	}
}
