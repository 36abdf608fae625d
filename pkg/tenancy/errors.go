package tenancy

import (
	"errors"
	"fmt"

	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/pkg/events"
)

var (
	// ErrInvalidTenant: a tenant id breaks the rule of events.ValidateTenant.
	// It is events.ErrInvalidTenant, so errors.Is matches either name.
	ErrInvalidTenant = events.ErrInvalidTenant
	// ErrInvalidDest: a destination is not one of a registered sink kind
	// (postgres, clickhouse or b2b:<partner>). It is kind.ErrInvalid.
	ErrInvalidDest = kind.ErrInvalid
	// ErrInvalidArgument: a limit, weight, sequence, lease id or token
	// reference is out of range or malformed.
	ErrInvalidArgument = errors.New("tenancy: invalid argument")
	// ErrTenantExists: CreateTenant on an id that is already taken.
	ErrTenantExists = errors.New("tenancy: tenant exists")
	// ErrUnknownTenant: the tenant has never been created nor seen.
	ErrUnknownTenant = errors.New("tenancy: unknown tenant")
	// ErrUnauthorized: a token is malformed, unknown or revoked.
	ErrUnauthorized = errors.New("tenancy: unauthorized")
	// ErrUnknownToken: RevokeToken was given an id, prefix or token that
	// names no token.
	ErrUnknownToken = errors.New("tenancy: unknown token")
	// ErrTokenRevoked: RevokeToken on a token that is revoked already.
	ErrTokenRevoked = errors.New("tenancy: token already revoked")
	// ErrAtLimit: no slot of the (tenant, destination) is free right now.
	// A dispatcher skips the tenant and waits for a Released wake-up.
	ErrAtLimit = errors.New("tenancy: at slot limit")
	// ErrPaused: the tenant is paused. It matches ErrAtLimit too
	// (errors.Is(ErrPaused, ErrAtLimit) is true), so a dispatcher that only
	// knows ErrAtLimit skips paused tenants correctly.
	ErrPaused = fmt.Errorf("%w: tenant paused", ErrAtLimit)
	// ErrStreamReset: the (tenant, destination) is held because its cursor
	// does not belong to the stream (CheckStream); `fairway cursors reset`
	// releases it. It matches ErrAtLimit too, like ErrPaused.
	ErrStreamReset = fmt.Errorf("%w: held for a stream reset", ErrAtLimit)
	// ErrStaleLease: the lease was fenced out — its slot has been leased
	// again under a newer token. Nothing was changed.
	ErrStaleLease = errors.New("tenancy: stale lease")
	// ErrCursorMoved: Dispatch expected the cursor at one sequence but
	// another dispatcher moved it. Nothing was changed and no slot taken.
	ErrCursorMoved = errors.New("tenancy: cursor moved")
)
