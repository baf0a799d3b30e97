package oauth

// CachedVerdicts is how many verdicts the cache holds.
func (rs *ResourceServer) CachedVerdicts() int { return rs.cache.len() }
