package client_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// TestMain lets this test binary stand in for a stdio server that can be
// made to die: MCPREL_CLIENT_TEST_SERVER=1 runs it as one.
func TestMain(m *testing.M) {
	if os.Getenv("MCPREL_CLIENT_TEST_SERVER") == "1" {
		os.Exit(serveUntilTold())
	}
	os.Exit(m.Run())
}

// serveUntilTold serves echo, and die, which ends the process mid-call.
func serveUntilTold() int {
	srv, err := server.New(mcp.Implementation{Name: "mortal", Version: "1"}, nil)
	if err != nil {
		return 1
	}
	srv.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(string(req.Arguments))}}, nil
	})
	srv.AddTool(server.Tool{Name: "die"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		os.Exit(3)
		return nil, nil
	})
	// spawn starts a process of its own that holds this server's stderr
	// and outlives it, as npx's node does, and says its pid.
	srv.AddTool(server.Tool{Name: "spawn"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		child := exec.Command("sleep", "600")
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(strconv.Itoa(child.Process.Pid))}}, nil
	})
	stdio.NewConn(srv, os.Stdin, os.Stdout, nil).Serve(context.Background())
	return 0
}

// A stdio server that dies is started again by the next call, in the era
// negotiated before; the call in flight when it died fails as a lost
// connection (the retry rules decide whether to repeat it). Without
// Restart, the client stays disconnected.
func TestRestartsADeadServer(t *testing.T) {
	t.Setenv("MCPREL_CLIENT_TEST_SERVER", "1")
	for _, restart := range []bool{true, false} {
		c, err := client.DialStdio(context.Background(), []string{os.Args[0]}, &client.Options{Restart: restart})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.CallTool(ctx, "echo", map[string]any{"n": 1}, nil); err != nil {
			t.Fatal(err)
		}
		era := c.Era()
		if _, err := c.CallTool(ctx, "die", nil, nil); !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("the call the server died in: %v, want ErrConnectionLost", err)
		}
		res, err := c.CallTool(ctx, "echo", map[string]any{"n": 2}, nil)
		if !restart {
			if !errors.Is(err, client.ErrConnectionLost) {
				t.Fatalf("without Restart, the next call: %+v, %v", res, err)
			}
			continue
		}
		if err != nil || len(res.Content) != 1 || c.Stats().Restarts != 1 || c.Stats().Reconnects != 1 || c.Era() != era {
			t.Fatalf("after the restart: %+v, %v, stats %+v, era %v (was %v)", res, err, c.Stats(), c.Era(), era)
		}
	}
}

// Close ends what a stdio server started too: a server run through npx is
// a tree of processes, and one that leaves a child holding its stderr
// would otherwise hold Close until that child ends, and outlive it.
func TestCloseEndsWhatTheServerStarted(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("process groups are a Unix notion")
	}
	t.Setenv("MCPREL_CLIENT_TEST_SERVER", "1")
	c, err := client.DialStdio(context.Background(), []string{os.Args[0]}, &client.Options{StopGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.CallTool(context.Background(), "spawn", nil, nil)
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("spawn: %+v, %v", res, err)
	}
	pid, err := strconv.Atoi(res.Content[0].(*mcp.TextContent).Text)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // a safety net: the child sleeps 600 s
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("Close waited for the server's child, which holds its stderr")
	}
	// The child is gone (once its new parent has reaped it).
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal("the server's child outlived Close")
		}
	}
}
