package eventlog_test

import (
	"testing"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/kubext/kubext/internal/eventlog"
)

func TestRecorderLogsEveryEvent(t *testing.T) {
	g := NewWithT(t)
	var logged []string
	log := funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
	fake := events.NewFakeRecorder(10)
	rec := eventlog.Wrap(fake, log)
	g.Expect(eventlog.Wrap(rec, log)).To(Equal(rec), "wrapping twice logs twice")

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "web-0"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	rec.Eventf(pod, nil, corev1.EventTypeWarning, "IPNotFound", "Claim", "IP %q does not exist", "front")
	rec.Eventf(node, pod, corev1.EventTypeNormal, "Moved", "Move", "moved")

	g.Expect(<-fake.Events).To(Equal(`Warning IPNotFound IP "front" does not exist`))
	g.Expect(<-fake.Events).To(Equal("Normal Moved moved"))
	g.Expect(logged).To(HaveLen(2))
	g.Expect(logged[0]).To(And(ContainSubstring(`"msg"="IP \"front\" does not exist"`), ContainSubstring(`"type"="Warning"`),
		ContainSubstring(`"reason"="IPNotFound"`), ContainSubstring(`"object"="web/web-0"`)))
	g.Expect(logged[1]).To(And(ContainSubstring(`"object"="node-1"`), ContainSubstring(`"related"="web/web-0"`)))
}
