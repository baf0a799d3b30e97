// Package oauthstore keeps the OAuth state of mcprel's gateway toward its
// upstreams (package client/oauth's State: tokens and client
// registrations) in the gateway's database, SQLite or PostgreSQL (package
// store), sealed with AES-GCM under a key the operator gives, so that a
// copy of the database holds no usable token.
//
// A Store is a client/oauth Store whose writes are conditional on the
// version they come from. An Authorizer built on it renews an upstream's
// tokens under a lease on the upstream's row, so that replicas sharing a
// PostgreSQL database refresh one at a time: a rotated refresh token is
// spent by exactly one of them, and saved before the access token that
// came with it is used; the others wait for it and use what it saved.
package oauthstore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/client/oauth"
	"github.com/mcprel/mcprel/store"
)

// KeySize is the size of a Store's key: AES-256.
const KeySize = 32

// component names the schema's migrations in the store.
const component = "oauthstore"

var migrations = []store.Migration{{
	Version: 1,
	// sealed is the State's JSON sealed with AES-GCM, base64; version
	// counts its writes, so that one is conditional on the one it comes
	// from; lease_holder and lease_until (Unix milliseconds) are the
	// refresh lease.
	SQL: `CREATE TABLE mcprel_oauth_state (
		key TEXT PRIMARY KEY,
		sealed TEXT NOT NULL,
		version BIGINT NOT NULL,
		lease_holder TEXT NOT NULL DEFAULT '',
		lease_until BIGINT NOT NULL DEFAULT 0,
		updated_at BIGINT NOT NULL)`,
}}

// ErrConflict is a Save whose row another Store changed since this one
// read it: its State was not written.
var ErrConflict = errors.New("oauthstore: the state was changed by another replica since it was read")

// ParseKey reads a key given as base64 (standard or URL alphabet, padded
// or not) of KeySize bytes. Its errors never hold the key.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("oauthstore: the key is %d bytes; it must be %d (e.g. head -c %d /dev/urandom | base64)", len(b), KeySize, KeySize)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("oauthstore: the key is not base64 (e.g. head -c %d /dev/urandom | base64)", KeySize)
}

// Options tune a Store. The zero value is the default.
type Options struct {
	// Lease is how long a replica renewing a token holds the upstream's
	// row; a replica that dies holding it delays the others that long.
	// Zero is DefaultLease.
	Lease time.Duration
	// Poll is how often a replica waiting for another's renewal looks for
	// it; zero is DefaultPoll.
	Poll time.Duration
	// Now is the clock of leases; nil is time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultLease = 2 * time.Minute
	DefaultPoll  = 100 * time.Millisecond
)

// Store keeps States in the database, one row per key (an upstream's
// resource URL). It is a client/oauth Store whose Save writes only over
// the version its Load read (else ErrConflict). Its methods are safe for
// concurrent use.
type Store struct {
	db     *store.DB
	aead   cipher.AEAD
	holder string // this Store's name in leases
	opts   Options

	mu       sync.Mutex
	versions map[string]int64 // by key, the version last read or written; 0: none
}

// New returns a Store on db, creating or migrating its table, that seals
// States with key (KeySize bytes).
func New(ctx context.Context, db *store.DB, key []byte, o *Options) (*Store, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("oauthstore: the key must be %d bytes", KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if err := db.Migrate(ctx, component, migrations); err != nil {
		return nil, err
	}
	s := &Store{db: db, aead: aead, versions: map[string]int64{}}
	if o != nil {
		s.opts = *o
	}
	if s.opts.Lease <= 0 {
		s.opts.Lease = DefaultLease
	}
	if s.opts.Poll <= 0 {
		s.opts.Poll = DefaultPoll
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	var b [12]byte
	rand.Read(b[:])
	s.holder = hex.EncodeToString(b[:])
	return s, nil
}

// aad binds a sealed State to its key: a row copied under another key
// does not open.
func aad(key string) []byte { return []byte("mcprel oauthstore v1\x00" + key) }

func (s *Store) seal(key string, st *oauth.State) (string, error) {
	plain, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	rand.Read(nonce)
	return base64.StdEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, aad(key))), nil
}

func (s *Store) open(key, sealed string) (*oauth.State, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize() {
		return nil, fmt.Errorf("oauthstore: the state of %s is damaged", key)
	}
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], aad(key))
	if err != nil {
		return nil, fmt.Errorf("oauthstore: the state of %s does not open with this key (another key sealed it, or it was altered)", key)
	}
	var st oauth.State
	if err := json.Unmarshal(plain, &st); err != nil {
		return nil, fmt.Errorf("oauthstore: the state of %s does not parse", key)
	}
	return &st, nil
}

func (s *Store) setVersion(key string, v int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions[key] = v
}

func (s *Store) version(key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[key]
}

// read returns key's State and version; nil and 0 when there is none.
func (s *Store) read(ctx context.Context, key string) (*oauth.State, int64, error) {
	var sealed string
	var version int64
	err := s.db.ReadTx(ctx, func(tx *store.Tx) error {
		return tx.QueryRow(ctx, `SELECT sealed, version FROM mcprel_oauth_state WHERE key = ?`, key).Scan(&sealed, &version)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := s.open(key, sealed)
	return st, version, err
}

// Load returns the State under key, or nil, and remembers its version
// for Save.
func (s *Store) Load(ctx context.Context, key string) (*oauth.State, error) {
	st, v, err := s.read(ctx, key)
	if err != nil {
		return nil, err
	}
	s.setVersion(key, v)
	return st, nil
}

// Save writes st under key if the row is still at the version this Store
// last read or wrote (absent, if it read none) and no other Store holds
// its refresh lease (a replica whose lease ran out mid-refresh, while
// another took it, does not write over the one refreshing now);
// otherwise it writes nothing and returns ErrConflict.
func (s *Store) Save(ctx context.Context, key string, st *oauth.State) error {
	sealed, err := s.seal(key, st)
	if err != nil {
		return err
	}
	from := s.version(key)
	now := s.opts.Now().UnixMilli()
	err = s.db.WriteTx(ctx, func(tx *store.Tx) error {
		var res sql.Result
		var err error
		if from == 0 {
			res, err = tx.Exec(ctx, `INSERT INTO mcprel_oauth_state (key, sealed, version, updated_at) VALUES (?, ?, 1, ?) ON CONFLICT (key) DO NOTHING`, key, sealed, now)
		} else {
			res, err = tx.Exec(ctx, `UPDATE mcprel_oauth_state SET sealed = ?, version = version + 1, updated_at = ?
				WHERE key = ? AND version = ? AND (lease_holder = '' OR lease_holder = ? OR lease_until < ?)`, sealed, now, key, from, s.holder, now)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return cmpErr(err, ErrConflict)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.setVersion(key, from+1)
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Put writes st under key whatever is there, and frees its lease: an
// operator's new authorization replaces the old one.
func (s *Store) Put(ctx context.Context, key string, st *oauth.State) error {
	sealed, err := s.seal(key, st)
	if err != nil {
		return err
	}
	now := s.opts.Now().UnixMilli()
	return s.db.WriteTx(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO mcprel_oauth_state (key, sealed, version, updated_at) VALUES (?, ?, 1, ?)
			ON CONFLICT (key) DO UPDATE SET sealed = excluded.sealed, version = mcprel_oauth_state.version + 1,
			lease_holder = '', lease_until = 0, updated_at = excluded.updated_at`, key, sealed, now)
		return err
	})
}

// Delete removes the State under key.
func (s *Store) Delete(ctx context.Context, key string) error {
	err := s.db.WriteTx(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM mcprel_oauth_state WHERE key = ?`, key)
		return err
	})
	if err == nil {
		s.setVersion(key, 0)
	}
	return err
}

// errMissing is a lease asked on a key with no row.
var errMissing = errors.New("oauthstore: no state")

// lease takes key's refresh lease for this Store, or renews it: true
// when this Store holds it now, false when another does; errMissing
// when there is no row. The update is conditional on the lease being
// free, expired or this Store's own.
func (s *Store) lease(ctx context.Context, key string) (bool, error) {
	now := s.opts.Now()
	held := false
	err := s.db.WriteTx(ctx, func(tx *store.Tx) error {
		res, err := tx.Exec(ctx, `UPDATE mcprel_oauth_state SET lease_holder = ?, lease_until = ?
			WHERE key = ? AND (lease_holder = ? OR lease_until < ?)`,
			s.holder, now.Add(s.opts.Lease).UnixMilli(), key, s.holder, now.UnixMilli())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if held = n == 1; held {
			return nil
		}
		var v int64
		err = tx.QueryRow(ctx, `SELECT version FROM mcprel_oauth_state WHERE key = ?`, key).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return errMissing
		}
		return err
	})
	return held, err
}

// release frees key's lease if this Store holds it.
func (s *Store) release(ctx context.Context, key string) error {
	ctx = context.WithoutCancel(ctx) // a lease is freed even when its request ended
	return s.db.WriteTx(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE mcprel_oauth_state SET lease_holder = '', lease_until = 0 WHERE key = ? AND lease_holder = ?`, key, s.holder)
		return err
	})
}
