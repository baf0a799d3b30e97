package stdio_test

import "context"

type contextT = context.Context
