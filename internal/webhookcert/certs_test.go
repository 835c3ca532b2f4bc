package webhookcert

import (
	"context"
	"crypto/x509"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestParseCertsRefusesWhatIsNotACertificate(t *testing.T) {
	g := NewWithT(t)
	ca, err := newCA(time.Now(), time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := parseCerts(append(append([]byte{}, ca.certPEM...), ca.certPEM...))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs).To(HaveLen(2))
	for _, bad := range [][]byte{
		[]byte("garbage"),
		append(append([]byte{}, ca.certPEM...), "trailing garbage"...),
		ca.keyPEM, // a key where a certificate belongs
		[]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
	} {
		_, err := parseCerts(bad)
		g.Expect(err).To(HaveOccurred(), string(bad))
	}
	// The lenient parse used on a webhook configuration's bundle keeps the
	// certificates and drops the rest.
	g.Expect(parseLenient(append(append([]byte{}, ca.keyPEM...), ca.certPEM...))).To(HaveLen(1))
}

func TestServingCertificateNeverOutlivesItsCA(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	ca, err := newCA(now, time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	names := []string{"svc.ns.svc", "svc.ns.svc.cluster.local"}
	kp, err := newServing(ca, now, 24*time.Hour, names, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kp.cert.NotAfter).To(Equal(ca.cert.NotAfter))
	g.Expect(verifyServing(kp.cert, []*x509.Certificate{ca.cert}, now, names, nil)).To(Succeed())
	g.Expect(verifyServing(kp.cert, []*x509.Certificate{ca.cert}, now, names, []net.IP{net.ParseIP("127.0.0.1")})).
		To(MatchError(ContainSubstring("127.0.0.1")))
	g.Expect(verifyServing(kp.cert, []*x509.Certificate{ca.cert}, ca.cert.NotAfter.Add(time.Second), names, nil)).NotTo(Succeed(), "expired")
	_, err = parseKeyPair(kp.certPEM, ca.keyPEM)
	g.Expect(err).To(MatchError(ContainSubstring("does not match")))
	g.Expect(validCA(kp.cert, now)).To(MatchError(ContainSubstring("not a CA")))
}

func TestRotationIsDueWithAThirdOfTheLifetimeLeft(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	ca, err := newCA(now, 90*time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(due(ca.cert, now, 90*time.Minute)).To(BeFalse(), "the backdate does not count")
	g.Expect(due(ca.cert, now.Add(59*time.Minute), 90*time.Minute)).To(BeFalse())
	g.Expect(due(ca.cert, now.Add(61*time.Minute), 90*time.Minute)).To(BeTrue())
}

func TestProvisionerRefusesACAThatCannotOutliveItsCertificates(t *testing.T) {
	p := &Provisioner{CertLifetime: time.Hour, CALifetime: 2 * time.Hour}
	NewWithT(t).Expect(p.Ensure(context.Background())).To(MatchError(ContainSubstring("at least three")))
}
