package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/delivery"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
)

// The ledger-backed demo tools: a small inventory and an account ledger
// whose mutations run at most once per idempotency key. Their business
// rows live beside the ledger, so each effect commits with its record.
//
// Every tool acts for the caller's tenant, the one the transport
// authenticated (server.Request.Tenant): over HTTP the tenant of the bearer
// token (--token TENANT=TOKEN), otherwise the one unnamed tenant "". No
// argument names a tenant, so the stock a call changes, the ledger record
// of its key and "mcprel ledger show --tenant" always agree.
var inventorySchema = []store.Migration{{
	Version: 1,
	SQL: `CREATE TABLE demo_inventory (
			tenant TEXT NOT NULL, sku TEXT NOT NULL,
			available BIGINT NOT NULL, version BIGINT NOT NULL,
			PRIMARY KEY (tenant, sku));
		CREATE TABLE demo_reservations (
			id TEXT PRIMARY KEY, tenant TEXT NOT NULL, sku TEXT NOT NULL,
			quantity BIGINT NOT NULL, idem_key TEXT NOT NULL, created_at BIGINT NOT NULL);
		CREATE TABLE demo_receipts (
			id TEXT PRIMARY KEY, tenant TEXT NOT NULL, account TEXT NOT NULL,
			cents BIGINT NOT NULL, idem_key TEXT, created_at BIGINT NOT NULL)`,
}}

type chargeArgs struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

type chargeResult struct {
	ReceiptID string `json:"receiptId"`
	Account   string `json:"account"`
	Cents     int64  `json:"cents"`
}

type reserveArgs struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

type reserveResult struct {
	ReservationID string `json:"reservationId"`
	SKU           string `json:"sku"`
	Quantity      int64  `json:"quantity"`
	Remaining     int64  `json:"remaining"`
	Version       int64  `json:"version"`
}

type stockKey struct {
	SKU string `json:"sku"`
}

type stockLevel struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Version   int64  `json:"version"`
}

type setStockArgs struct {
	SKU             string `json:"sku"`
	Quantity        int64  `json:"quantity"`
	ExpectedVersion int64  `json:"expectedVersion"`
}

const (
	nameSchema = `{"type":"string","minLength":1,"maxLength":128}`
	keySchema  = `{"type":"string","minLength":1,"maxLength":255,"description":"a unique key for this operation (a UUID); reuse it on every retry of the same operation"}`
)

// addLedgerTools registers the ledger-backed demo tools on srv, whose
// Options.Ledger is l; lookup_operation shows the deliveries of ob, the
// outbox, when there is one.
func addLedgerTools(srv *server.Server, l *ledger.Ledger, ob *outbox.Outbox) error {
	db := l.DB()
	if err := db.Migrate(context.Background(), "demo", inventorySchema); err != nil {
		return err
	}
	mutating := func(idempotent bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(false), DestructiveHint: mcp.Bool(false), IdempotentHint: mcp.Bool(idempotent), OpenWorldHint: mcp.Bool(false)}
	}
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)}

	err := server.AddTypedTool(srv, server.Tool{
		Name: "charge_account",
		Description: "Charges cents to an account and writes a receipt. Pass idempotencyKey (a new UUID per charge) and " +
			"reuse it on every retry: the charge then happens at most once and a retry returns the original receipt " +
			"(_meta dev.mcprel/replayed). Without a key every call charges again: do not retry it blindly; look for " +
			"the receipt first.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"account":` + nameSchema + `,"cents":{"type":"integer","minimum":1,"maximum":100000000},` +
			`"idempotencyKey":` + keySchema + `},"required":["account","cents"],"additionalProperties":false}`),
		Annotations: mutating(false),
	}, func(ctx context.Context, req *server.CallRequest, in chargeArgs) (chargeResult, error) {
		id, key := "rcpt_"+rand.Text(), idempotency.Key(req)
		_, err := idempotency.Tx(req).Exec(ctx, `INSERT INTO demo_receipts (id, tenant, account, cents, idem_key, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			id, req.Tenant, in.Account, in.Cents, sql.Null[string]{V: key, Valid: key != ""}, time.Now().UnixMilli())
		if err != nil {
			return chargeResult{}, err
		}
		return chargeResult{ReceiptID: id, Account: in.Account, Cents: in.Cents}, nil
	}, idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyOptional, Fields: []string{"account", "cents"}}))
	if err != nil {
		return err
	}

	err = server.AddTypedTool(srv, server.Tool{
		Name: "reserve_inventory",
		Description: "Reserves quantity units of a SKU. idempotencyKey is required: use a new UUID per reservation " +
			"and the same one on every retry. A retry with the same key returns the original reservation without " +
			"reserving again; the same key with another SKU or quantity is refused (idempotency_conflict). " +
			"insufficient_stock is a final answer for that key; unknown_sku is not (retry once the SKU exists). After a timeout or a lost response, retry with the " +
			"same key, or check with lookup_operation; read stock with get_inventory.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"sku":` + nameSchema + `,"quantity":{"type":"integer","minimum":1,"maximum":1000000},` +
			`"idempotencyKey":` + keySchema + `},"required":["sku","quantity","idempotencyKey"],"additionalProperties":false}`),
		Annotations: mutating(true),
	},
		func(ctx context.Context, req *server.CallRequest, in reserveArgs) (reserveResult, error) {
			tx := idempotency.Tx(req)
			out := reserveResult{ReservationID: "res_" + rand.Text(), SKU: in.SKU, Quantity: in.Quantity}
			err := tx.QueryRow(ctx, `UPDATE demo_inventory SET available = available - ?, version = version + 1
			WHERE tenant = ? AND sku = ? AND available >= ? RETURNING available, version`,
				in.Quantity, req.Tenant, in.SKU, in.Quantity).Scan(&out.Remaining, &out.Version)
			if errors.Is(err, sql.ErrNoRows) {
				level, lerr := readStock(ctx, tx, req.Tenant, in.SKU)
				if lerr != nil {
					return reserveResult{}, lerr
				}
				return reserveResult{}, &mcp.ToolError{
					Code:    "insufficient_stock",
					Message: fmt.Sprintf("only %d of %s available, %d requested; nothing was reserved", level.Available, in.SKU, in.Quantity),
					Details: map[string]any{"available": level.Available, "requested": in.Quantity},
				}
			}
			if err != nil {
				return reserveResult{}, err
			}
			_, err = tx.Exec(ctx, `INSERT INTO demo_reservations (id, tenant, sku, quantity, idem_key, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
				out.ReservationID, req.Tenant, in.SKU, in.Quantity, idempotency.Key(req), time.Now().UnixMilli())
			return out, err
		},
		// insufficient_stock is this reservation's answer and is replayed;
		// an unknown SKU is a precondition that set_stock may fix, so it
		// is not stored and a retry with the same key runs again.
		idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyRequired, Fields: []string{"sku", "quantity"}, Preconditions: []string{"unknown_sku"}}))
	if err != nil {
		return err
	}

	err = server.AddTypedTool(srv, server.Tool{
		Name:        "get_inventory",
		Description: "Returns the stock of a SKU and its version: the authoritative read after a timeout or a lost response. Read-only; safe to retry.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"sku":` + nameSchema + `},"required":["sku"],"additionalProperties":false}`),
		Annotations: readOnly,
		Policy:      server.Policy{Timeout: server.TimeoutFast, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in stockKey) (stockLevel, error) {
		var level stockLevel
		err := db.ReadTx(ctx, func(tx *store.Tx) (err error) {
			level, err = readStock(ctx, tx, req.Tenant, in.SKU)
			return err
		})
		return level, err
	})
	if err != nil {
		return err
	}

	// What tools/list says of set_stock's deduplication: its expected
	// version, checked and bumped in the one transaction that writes.
	versioned := idempotency.LedgerMeta(l, false)
	versioned[mcp.MetaKeyMode] = mcp.KeyModeVersion
	versioned[mcp.MetaLedgerTransaction] = []string{mcp.LedgerEffectRecord}
	err = server.AddTypedTool(srv, server.Tool{
		Name: "set_stock",
		Description: "Sets the stock of a SKU to quantity if its version is still expectedVersion (0 creates a new SKU). " +
			"A stale version is refused with version_conflict and the current version: read get_inventory, decide again, " +
			"and retry with the new version. Repeating a call that succeeded is refused the same way, never applied twice.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"sku":` + nameSchema + `,` +
			`"quantity":{"type":"integer","minimum":0,"maximum":1000000000},"expectedVersion":{"type":"integer","minimum":0}},` +
			`"required":["sku","quantity","expectedVersion"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(false), DestructiveHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
		// The expected version is its key: a retry of a call that took
		// effect is refused, never applied twice.
		Policy: server.Policy{Retry: mcp.RetryConditional},
		Meta:   versioned,
	}, func(ctx context.Context, req *server.CallRequest, in setStockArgs) (stockLevel, error) {
		out := stockLevel{SKU: in.SKU, Available: in.Quantity}
		err := db.WriteTx(ctx, func(tx *store.Tx) error {
			var res sql.Result
			var err error
			if in.ExpectedVersion == 0 {
				res, err = tx.Exec(ctx, `INSERT INTO demo_inventory (tenant, sku, available, version) VALUES (?, ?, ?, 1)
					ON CONFLICT (tenant, sku) DO NOTHING`, req.Tenant, in.SKU, in.Quantity)
			} else {
				res, err = tx.Exec(ctx, `UPDATE demo_inventory SET available = ?, version = version + 1
					WHERE tenant = ? AND sku = ? AND version = ?`, in.Quantity, req.Tenant, in.SKU, in.ExpectedVersion)
			}
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				out.Version = in.ExpectedVersion + 1
				return nil
			}
			current, err := readStock(ctx, tx, req.Tenant, in.SKU)
			var te *mcp.ToolError
			if errors.As(err, &te) { // no such SKU
				te.Message += "; create it with expectedVersion 0"
				return te
			}
			if err != nil {
				return err
			}
			return &mcp.ToolError{
				Code:    "version_conflict",
				Message: fmt.Sprintf("%s is at version %d, not %d: nothing changed; read it again and decide with the current stock", in.SKU, current.Version, in.ExpectedVersion),
				Details: map[string]any{"currentVersion": current.Version, "available": current.Available},
			}
		})
		return out, err
	})
	if err != nil {
		return err
	}

	keyed := []string{"charge_account", "reserve_inventory"}
	lookup := idempotency.Lookup{Tools: keyed,
		Description: "Reconciles a keyed operation after a timeout or a lost response: whether the operation with this " +
			"idempotencyKey committed, its stored result, when, how many times it ran, and for a payout whether the " +
			"provider has paid it. Read-only; safe to retry. " +
			"Never repeat an operation under a new key to find out."}
	if ob != nil {
		lookup.Tools = append(keyed, "send_payout")
		lookup.Describe = delivery.Deliveries(ob)
	}
	return idempotency.AddLookup(srv, l, lookup)
}

func readStock(ctx context.Context, tx *store.Tx, tenant, sku string) (stockLevel, error) {
	level := stockLevel{SKU: sku}
	err := tx.QueryRow(ctx, `SELECT available, version FROM demo_inventory WHERE tenant = ? AND sku = ?`, tenant, sku).Scan(&level.Available, &level.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return level, &mcp.ToolError{Code: "unknown_sku", Message: fmt.Sprintf("there is no SKU %q", sku)}
	}
	return level, err
}
