package statuspatch

import (
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Error is a reconcile failure the object's status explains: the condition
// reason and message it sets, and whether retrying can help. A reconciler
// returns it from the step that failed and sets the condition from it in
// one place; errors.As finds it through any wrapping.
type Error struct {
	// Reason is the condition reason, one of the API's Reason constants.
	Reason string
	// Message is the condition message, written for the object's user.
	Message string
	// Terminal says only a new spec can help: the controller does not
	// retry (reconcile.TerminalError), and the generation counts as
	// observed.
	Terminal bool
	// Err is the cause, nil when Message says it all.
	Err error
}

// Failed is a failure a later reconcile may get past: an API call that
// failed, something the object waits for.
func Failed(reason string, err error, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Err: err}
}

// Refused is a failure only a new spec gets past.
func Refused(reason string, err error, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Terminal: true, Err: err}
}

func (e *Error) Error() string { return e.Message }

// Unwrap gives the cause, as a reconcile.TerminalError when Terminal so
// that controller-runtime and Finished see it as one.
func (e *Error) Unwrap() error {
	if e.Terminal {
		return reconcile.TerminalError(e.Err)
	}
	return e.Err
}

// As finds the *Error in err's chain, nil if there is none.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
