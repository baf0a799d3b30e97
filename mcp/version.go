package mcp

import "slices"

// Protocol revisions mcprel serves.
const (
	// Version20260728 is the current, stateless revision: no handshake, no
	// sessions, version and capabilities in every request's _meta.
	Version20260728 = "2026-07-28"
	// Version20251125 and the two before it use the initialize handshake.
	Version20251125 = "2025-11-25"
	Version20250618 = "2025-06-18"
	Version20250326 = "2025-03-26"
	// Version20241105 is the first revision, whose HTTP+SSE transport
	// many deployed servers still speak only. mcprel's server does not
	// serve it; its client accepts it from such a server.
	Version20241105 = "2024-11-05"
)

// LatestLegacyVersion is what initialize negotiates to when the client asks
// for a revision mcprel does not serve through the handshake.
const LatestLegacyVersion = Version20251125

var (
	modernVersions = []string{Version20260728}
	legacyVersions = []string{Version20251125, Version20250618, Version20250326}
)

// Era is the family of protocol revisions a request is served under.
type Era uint8

const (
	// Legacy is 2025-03-26 … 2025-11-25: initialize handshake and
	// sessions; on Streamable HTTP a dropped stream is not a cancellation.
	Legacy Era = iota + 1
	// Modern is 2026-07-28 and later: stateless, per-request _meta; on
	// Streamable HTTP closing a request's stream cancels it.
	Modern
)

// String returns "legacy" or "modern".
func (e Era) String() string {
	switch e {
	case Legacy:
		return "legacy"
	case Modern:
		return "modern"
	}
	return "unknown"
}

// SupportedVersions lists every revision mcprel serves, newest first. It is
// what server/discover advertises and what an UnsupportedProtocolVersion
// error lists; the legacy ones are reached through initialize.
func SupportedVersions() []string {
	return slices.Concat(modernVersions, legacyVersions)
}

// IsModernVersion reports whether v is a stateless revision served through
// per-request _meta.
func IsModernVersion(v string) bool { return slices.Contains(modernVersions, v) }

// IsLegacyVersion reports whether v is a handshake revision mcprel serves.
func IsLegacyVersion(v string) bool { return slices.Contains(legacyVersions, v) }

// NegotiateLegacy returns the revision an initialize request settles on: the
// requested one when it is a legacy revision mcprel serves, otherwise the
// latest legacy revision, as the lifecycle rules require. A client that
// cannot use the answer disconnects.
func NegotiateLegacy(requested string) string {
	if IsLegacyVersion(requested) {
		return requested
	}
	return LatestLegacyVersion
}

// Version is the newest revision of the era, the one mcprel asks for
// when it speaks the era as a client.
func (e Era) Version() string {
	if e == Modern {
		return Version20260728
	}
	return Version20251125
}
