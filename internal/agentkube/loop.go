package agentkube

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Loop runs an agent's reconcile of its whole node whenever something it
// watches changes: one key, so changes that come while a pass runs lead
// to one more pass, not one each. A failed pass is tried again with the
// work queue's backoff; a pass can ask to run again after a while.
type Loop struct {
	key   string
	queue workqueue.TypedRateLimitingInterface[string]
	log   logr.Logger
}

// NewLoop makes the loop of name (its work queue's name, in the log and
// the work queue metrics).
func NewLoop(name string, log logr.Logger) *Loop {
	return &Loop{
		key: name,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		log: log,
	}
}

// Trigger asks for a pass.
func (l *Loop) Trigger() { l.queue.Add(l.key) }

// Handler triggers a pass on every change an informer sees.
func (l *Loop) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { l.Trigger() },
		UpdateFunc: func(any, any) { l.Trigger() },
		DeleteFunc: func(any) { l.Trigger() },
	}
}

// Run runs reconcile for every pass asked for until ctx ends. reconcile
// returns when to run again (0: when something changes) or an error (again
// after a backoff).
func (l *Loop) Run(ctx context.Context, reconcile func(context.Context) (time.Duration, error)) {
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	pctx := logr.NewContext(ctx, l.log)
	for {
		key, quit := l.queue.Get()
		if quit {
			return
		}
		after, err := l.pass(pctx, reconcile)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			l.log.Error(err, "Reconciling")
			l.queue.AddRateLimited(key)
		case after > 0:
			l.queue.Forget(key)
			l.queue.AddAfter(key, after)
		default:
			l.queue.Forget(key)
		}
		l.queue.Done(key)
	}
}

// pass runs one reconcile; a panic is an error, so that one bad object
// costs a backoff, not the agent.
func (l *Loop) pass(ctx context.Context, reconcile func(context.Context) (time.Duration, error)) (after time.Duration, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return reconcile(ctx)
}
