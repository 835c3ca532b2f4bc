package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubext/kubext/test/lab"
)

// PauseComponent really freezes the component (a request gets no answer),
// resume brings it back, and a pause nobody resumes ends by itself: the
// failover bench's stall relies on all three.
func TestLabPauseComponent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cfg, err := theLab.RESTConfig()
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	g.Expect(get(5 * time.Second)).To(Succeed())

	for _, comp := range []string{lab.ComponentAPIServer, lab.ComponentEtcd} {
		resume, err := theLab.PauseComponent(comp, 10*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(get(500*time.Millisecond)).NotTo(Succeed(), "%s is frozen: nothing answers", comp)
		g.Expect(resume()).To(Succeed())
		g.Expect(resume()).To(Succeed(), "resuming twice is harmless")
		g.Expect(get(5*time.Second)).To(Succeed(), "%s answers again", comp)
	}

	// Nobody calls resume: the pause ends after atMost.
	start := time.Now()
	_, err = theLab.PauseComponent(lab.ComponentAPIServer, 700*time.Millisecond)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(get(5 * time.Second)).To(Succeed())
	g.Expect(time.Since(start)).To(BeNumerically(">=", 600*time.Millisecond), "the request waited for the pause to end")

	for _, bad := range []string{"", "../kwok", "no-such-component"} {
		_, err := theLab.PauseComponent(bad, time.Second)
		g.Expect(err).To(HaveOccurred(), "component %q", bad)
	}
}
