package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// State is what the client keeps about one server between runs: the
// tokens, the authorization server that issued them, and the client
// registrations it holds with each authorization server. It holds
// secrets; a Store keeps it where only its user can read it.
type State struct {
	// Resource is the resource parameter sent for the tokens, the
	// server's Protected Resource Metadata's resource byte for byte.
	Resource string `json:"resource,omitempty"`
	// Issuer is the authorization server that issued the tokens.
	Issuer string `json:"issuer,omitempty"`
	// TokenEndpoint is Issuer's, for refreshing without discovery.
	TokenEndpoint string `json:"token_endpoint,omitempty"`

	AccessToken  string `json:"access_token,omitempty"`
	RefreshToken string `json:"refresh_token,omitempty"`
	// Expiry is when AccessToken expires; zero when the server did not
	// say.
	Expiry time.Time `json:"expiry,omitzero"`
	// Scopes are the scopes granted, or requested when the server did not
	// say which it granted; a step-up asks for them and the new ones.
	Scopes []string `json:"scopes,omitempty"`

	// Registrations are the client registrations by issuer. One is used
	// with its issuer only; a dynamic one carries its secret, if any.
	Registrations map[string]Registration `json:"registrations,omitempty"`
}

// Registration is how the client is known to one authorization server.
type Registration struct {
	ClientID string `json:"client_id"`
	// ClientSecret is a dynamically registered client's secret; a
	// pre-registered one's stays in Options and is never stored.
	ClientSecret string `json:"client_secret,omitempty"`
	// AuthMethod is the token endpoint authentication method: none,
	// client_secret_basic or client_secret_post.
	AuthMethod string `json:"token_endpoint_auth_method"`
	// Source is how the client_id came: "preregistered",
	// "metadata-document" or "dynamic".
	Source string `json:"source"`
	// RedirectURI is the redirect URI a dynamic registration registered:
	// a Client whose Options.RedirectURL differs registers anew, since
	// an authorization server may hold a client to its URIs exactly (a
	// loopback port included). "" for a registration kept before it was
	// recorded, which is used whatever the URL.
	RedirectURI string `json:"redirect_uri,omitempty"`
}

// Sources of a Registration.
const (
	SourcePreregistered    = "preregistered"
	SourceMetadataDocument = "metadata-document"
	SourceDynamic          = "dynamic"
)

func (s *State) clone() *State {
	if s == nil {
		return &State{}
	}
	c := *s
	c.Scopes = slices.Clone(s.Scopes)
	c.Registrations = maps.Clone(s.Registrations)
	return &c
}

// Store keeps States by key, the server's resource identifier (its URL
// without fragment). Methods are called one at a time per key by a
// Client, but a Store shared by Clients must be safe for concurrent use.
type Store interface {
	// Load returns the State saved under key, or nil and no error when
	// there is none.
	Load(ctx context.Context, key string) (*State, error)
	// Save replaces the State under key; when it returns nil, a Load
	// after a crash finds it.
	Save(ctx context.Context, key string, s *State) error
	// Delete removes the State under key; a missing one is no error.
	Delete(ctx context.Context, key string) error
}

// MemoryStore is a Store in memory, for tests and for programs that sign
// in anew each run. The zero value is ready to use; it keeps copies, so a
// caller's State is never shared with it.
type MemoryStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (m *MemoryStore) Load(_ context.Context, key string) (*State, error) {
	m.mu.Lock()
	b, ok := m.m[key]
	m.mu.Unlock()
	if !ok {
		return nil, nil
	}
	var s State
	return &s, json.Unmarshal(b, &s)
}

func (m *MemoryStore) Save(_ context.Context, key string, s *State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string][]byte{}
	}
	m.m[key] = b
	return nil
}

func (m *MemoryStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
	return nil
}

// FileStore keeps each State in a JSON file of its own under Dir, named
// for a hash of its key. Files are 0600 and Dir 0700 when FileStore
// creates it; every save writes a temporary file, syncs it and renames it
// over the old one, so a crash leaves the old State or the new, never a
// torn one. The zero value uses DefaultDir.
type FileStore struct {
	// Dir is the directory; "" is DefaultDir().
	Dir string
}

// DefaultDir is mcprel/oauth under the user's configuration directory
// (os.UserConfigDir), e.g. ~/.config/mcprel/oauth.
func DefaultDir() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "mcprel", "oauth"), nil
}

func (f FileStore) path(key string) (string, error) {
	dir := f.Dir
	if dir == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".json"), nil
}

// fileState is the file's content: the key, so a reader of the directory
// can tell which server a file is for, and the State.
type fileState struct {
	Key   string `json:"key"`
	State *State `json:"state"`
}

func (f FileStore) Load(_ context.Context, key string) (*State, error) {
	p, err := f.path(key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var fsState fileState
	if err := json.Unmarshal(b, &fsState); err != nil {
		return nil, fmt.Errorf("oauth: %s does not parse: %v", p, jsonWhy(err))
	}
	if fsState.Key != key {
		return nil, fmt.Errorf("oauth: %s holds the state of another key", p)
	}
	return fsState.State, nil
}

func (f FileStore) Save(_ context.Context, key string, s *State) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(fileState{Key: key, State: s}, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*.json") // created 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	// Make the rename itself durable; not every system can sync a
	// directory, and the file is complete either way.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func (f FileStore) Delete(_ context.Context, key string) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
