package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Test corpora: the project's shared/corpus folder beside the checkout is
// the authoritative copy (CI and development sessions have it);
// testdata/corpus holds an unmodified copy so that the tests of a fresh
// clone run too.
var (
	sharedCorpusDir = filepath.Join("..", "..", "shared", "corpus")
	localCorpusDir  = filepath.Join("testdata", "corpus")
)

// corpusPath returns the path of corpus file name, preferring the shared
// copy.
func corpusPath(name string) string {
	if p := filepath.Join(sharedCorpusDir, name); fileExists(p) {
		return p
	}
	return filepath.Join(localCorpusDir, name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// The committed copy must be the shared corpus as it is.
func TestCorpusCopyMatchesShared(t *testing.T) {
	for _, name := range []string{"addresses.tsv", "hosts.tsv"} {
		local, err := os.ReadFile(filepath.Join(localCorpusDir, name))
		if err != nil {
			t.Fatal(err)
		}
		shared, err := os.ReadFile(filepath.Join(sharedCorpusDir, name))
		if os.IsNotExist(err) {
			t.Logf("%s: no shared/ beside the checkout; testing with the committed copy", name)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(local, shared) {
			t.Errorf("policy/testdata/corpus/%s differs from shared/corpus/%s: copy it again (cp ../shared/corpus/*.tsv policy/testdata/corpus/)", name, name)
		}
	}
}
