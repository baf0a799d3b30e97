package store_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/store"
)

// openerEnv, set, makes the test binary a process that opens the SQLite
// file it names and exits: TestConcurrentOpensOfANewFile's processes.
const openerEnv = "MCPREL_STORE_TEST_OPEN"

func TestMain(m *testing.M) {
	if path := os.Getenv(openerEnv); path != "" {
		db, err := store.Open(context.Background(), path, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		db.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Processes that open one new SQLite file at the same moment (replicas,
// or a supervisor starting several) all open it. SQLite may answer one
// of them SQLITE_BUSY at once, without waiting out the busy timeout (it
// calls no busy handler where waiting could deadlock), as eight gateways
// starting on one file under load once saw: the open is tried again.
func TestConcurrentOpensOfANewFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for round := range 10 {
		path := filepath.Join(t.TempDir(), "new.db")
		var wg sync.WaitGroup
		outs := make([][]byte, 8)
		errs := make([]error, 8)
		for i := range outs {
			wg.Go(func() {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), openerEnv+"="+path)
				outs[i], errs[i] = cmd.CombinedOutput()
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: process %d: %v: %s", round, i, err, outs[i])
			}
		}
	}
}
