package ts_test

import (
	"os"
	"testing"

	"github.com/mcprel/mcprel/internal/interop/sdkauth"
)

func TestMain(m *testing.M) {
	sdkauth.BrowserMain() // mcprel opened the test binary as its $BROWSER
	os.Exit(m.Run())
}
