package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcprel/mcprel/store"
)

// Listing limits.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// The states List filters by. Failed is a committed operation whose stored
// result is a failure (isError set): what "ledger resolve --failed"
// records, or a tool's own failed answer. Committed excludes those.
const (
	ListUnknown    = "unknown"
	ListInProgress = "in_progress"
	ListFailed     = "failed"
	ListCommitted  = "committed"
)

// ListStates are the states List filters by, in the order they are
// documented.
var ListStates = []string{ListUnknown, ListInProgress, ListFailed, ListCommitted}

// ListQuery chooses the records List returns.
type ListQuery struct {
	// State is one of ListStates, or "" for every state.
	State string
	// Tenant, when not nil, keeps the records of that tenant only ("" is
	// a tenant: the one of calls made without a token).
	Tenant *string
	// Tool, when not empty, keeps the records of that tool only.
	Tool string
	// Before, when not zero, keeps the records whose time (Listed.At) is
	// at or before it.
	Before time.Time
	// Cursor is Page.Next of the page before, "" for the first page.
	Cursor string
	// Limit bounds the records of a page: 0 is DefaultListLimit, and it
	// is at most MaxListLimit.
	Limit int
}

// Listed is one record of a listing.
type Listed struct {
	Record
	// At is when the record last changed state: when its outcome became
	// unknown or it committed, or, in progress, when its claim was taken.
	At time.Time
	// Failed says a committed record's result is a failure.
	Failed bool
}

// ListState is the state the listing names rec by: one of ListStates.
func (rec *Listed) ListState() string {
	switch {
	case rec.State == OutcomeUnknown:
		return ListUnknown
	case rec.State == InProgress:
		return ListInProgress
	case rec.Failed:
		return ListFailed
	}
	return ListCommitted
}

// Page is one page of a listing.
type Page struct {
	Records []Listed
	// Next is the cursor of the page after, "" when this one is the last.
	Next string
}

// ErrBadCursor: a ListQuery.Cursor that no listing returned.
var ErrBadCursor = errors.New("ledger: the cursor is not one a listing returned")

// cursor is where a listing goes on from: the last record it returned, in
// the listing's order.
type cursor struct {
	At                int64
	Tenant, Tool, Key string
}

func (c cursor) encode() string {
	b, _ := json.Marshal([]any{c.At, c.Tenant, c.Tool, c.Key})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, ErrBadCursor
	}
	var parts []json.RawMessage
	var c cursor
	if json.Unmarshal(b, &parts) != nil || len(parts) != 4 ||
		json.Unmarshal(parts[0], &c.At) != nil || json.Unmarshal(parts[1], &c.Tenant) != nil ||
		json.Unmarshal(parts[2], &c.Tool) != nil || json.Unmarshal(parts[3], &c.Key) != nil {
		return cursor{}, ErrBadCursor
	}
	return c, nil
}

// List returns the live records q chooses, newest first (by Listed.At,
// then by tenant, tool and key, descending, so that records of the same
// millisecond are ordered too), a page at a time: Page.Next goes on after
// the last record of the page, and paging sees every record that stays
// unchanged exactly once. It only reads, and works on a database opened
// read-only beside a running writer.
//
// The unknown outcomes are read through an index of their own, so
// listing them costs a page's worth of reads however many records the
// ledger holds; the other states are read by a scan of the records.
func (l *Ledger) List(ctx context.Context, q ListQuery) (_ Page, err error) {
	ctx, end := l.observe(ctx, "list")
	defer func() { end(err) }()
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return Page{}, fmt.Errorf("ledger: a listing's limit is 1 to %d, not %d", MaxListLimit, limit)
	}
	query, args, err := l.listQuery(q, limit+1)
	if err != nil {
		return Page{}, err
	}
	var page Page
	err = l.db.ReadTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var at int64
			var failed bool
			rec, err := scanRecord(scanWith(rows, &at, &failed))
			if err != nil {
				return err
			}
			page.Records = append(page.Records, Listed{Record: *rec, At: time.UnixMilli(at), Failed: failed})
		}
		return rows.Err()
	})
	if err != nil {
		return Page{}, err
	}
	if len(page.Records) > limit {
		page.Records = page.Records[:limit]
		last := page.Records[limit-1]
		page.Next = cursor{At: ms(last.At), Tenant: last.Tenant, Tool: last.Tool, Key: last.Key}.encode()
	}
	return page, nil
}

// extraScanner scans a row of recordColumns followed by the listing's
// time and failure flag.
type extraScanner struct {
	rows   interface{ Scan(...any) error }
	at     *int64
	failed *bool
}

func scanWith(rows interface{ Scan(...any) error }, at *int64, failed *bool) extraScanner {
	return extraScanner{rows, at, failed}
}

func (s extraScanner) Scan(dest ...any) error {
	return s.rows.Scan(append(dest, s.at, s.failed)...)
}

// listQuery is the statement of a listing of q, of up to limit records.
// States are written into it as literals: PostgreSQL uses the partial
// index of unknown outcomes only for a query whose condition implies the
// index's, which a parameter would not.
func (l *Ledger) listQuery(q ListQuery, limit int) (string, []any, error) {
	// An unknown outcome always has executed_at; naming the column
	// itself, not the expression, lets the index serve the order.
	at := `COALESCE(executed_at, claimed_at, created_at)`
	failed := `COALESCE(CASE WHEN json_valid(result) THEN json_extract(result, '$.isError') END, 0) = 1`
	if l.db.Dialect() == store.Postgres {
		// PostgreSQL's JSON refuses a \u0000 anywhere in a document
		// it reads a member of: such a result is read as text.
		failed = `CASE WHEN strpos(result, '\u0000') > 0 THEN result ~ '^\s*\{.*"isError"\s*:\s*true'
			ELSE COALESCE((result::json ->> 'isError') = 'true', false) END`
	}
	where := []string{`expires_at > ?`}
	args := []any{ms(l.now())}
	switch q.State {
	case "":
	case ListUnknown:
		at = `executed_at`
		where = append(where, fmt.Sprintf(`state = %d`, OutcomeUnknown))
	case ListInProgress:
		where = append(where, fmt.Sprintf(`state = %d`, InProgress))
	case ListCommitted:
		where = append(where, fmt.Sprintf(`state = %d AND NOT (%s)`, Committed, failed))
	case ListFailed:
		where = append(where, fmt.Sprintf(`state = %d AND %s`, Committed, failed))
	default:
		return "", nil, fmt.Errorf("ledger: no state %q to list: one of %s", q.State, strings.Join(ListStates, ", "))
	}
	// On SQLite a column held equal by the condition no longer orders
	// the index for it, and the listing would be sorted whole: the
	// unary plus keeps the condition a filter on the index's order.
	plus := ""
	if l.db.Dialect() == store.SQLite {
		plus = "+"
	}
	if q.Tenant != nil {
		where, args = append(where, plus+`tenant = ?`), append(args, *q.Tenant)
	}
	if q.Tool != "" {
		where, args = append(where, plus+`tool = ?`), append(args, q.Tool)
	}
	if !q.Before.IsZero() {
		where, args = append(where, at+` <= ?`), append(args, ms(q.Before))
	}
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		where = append(where, `(`+at+`, tenant, tool, idem_key) < (?, ?, ?, ?)`)
		args = append(args, c.At, c.Tenant, c.Tool, c.Key)
	}
	query := `SELECT ` + recordColumns + `, ` + at + `, ` + fmt.Sprintf(`state = %d AND %s`, Committed, failed) +
		` FROM mcprel_ledger WHERE ` + strings.Join(where, ` AND `) +
		` ORDER BY ` + at + ` DESC, tenant DESC, tool DESC, idem_key DESC LIMIT ?`
	return query, append(args, limit), nil
}

// UnknownByTool counts the live records whose outcome is unknown, by tool:
// the operations waiting for an operator to reconcile them. It reads the
// index of unknown outcomes only.
func (l *Ledger) UnknownByTool(ctx context.Context) (_ map[string]int, err error) {
	ctx, end := l.observe(ctx, "count_unknown")
	defer func() { end(err) }()
	counts := map[string]int{}
	err = l.db.ReadTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.Query(ctx, countUnknown, ms(l.now()))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var tool string
			var n int
			if err := rows.Scan(&tool, &n); err != nil {
				return err
			}
			counts[tool] = n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// countUnknown counts the live unknown outcomes by tool.
var countUnknown = fmt.Sprintf(`SELECT tool, COUNT(*) FROM mcprel_ledger WHERE state = %d AND expires_at > ? GROUP BY tool`, OutcomeUnknown)
