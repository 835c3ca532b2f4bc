package ipcmd

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// reasonMoveRefused is the reason of the Warning event the controller
// records when it will not honour ip.kubext.io/move-to.
const reasonMoveRefused = "MoveRefused"

// ipEvents lists the events.k8s.io/v1 Events about one IP, oldest first.
// Events about a cluster-scoped object live in the default namespace, but
// the search spans all namespaces so that no recorder's choice is missed.
func ipEvents(ctx context.Context, c client.Reader, ip *ipv1.IP) ([]eventsv1.Event, error) {
	list := &eventsv1.EventList{}
	if err := c.List(ctx, list, client.MatchingFields{"regarding.uid": string(ip.UID)}); err != nil {
		return nil, err
	}
	sortEvents(list.Items)
	return list.Items, nil
}

// eventTime is when an event last happened.
func eventTime(e *eventsv1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// sortEvents orders events oldest first.
func sortEvents(events []eventsv1.Event) {
	slices.SortStableFunc(events, func(a, b eventsv1.Event) int {
		return eventTime(&a).Compare(eventTime(&b))
	})
}

// latestRefusal is the newest MoveRefused warning among events sorted
// oldest first, or nil.
func latestRefusal(events []eventsv1.Event) *eventsv1.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if e := &events[i]; e.Type == corev1.EventTypeWarning && e.Reason == reasonMoveRefused {
			return e
		}
	}
	return nil
}
