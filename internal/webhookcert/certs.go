package webhookcert

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// backdate is how far before "now" a certificate's validity starts, so
// that an API server whose clock is a little behind ours still accepts it.
const backdate = time.Hour

// keyPair is a parsed certificate with its private key.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// newCA makes a self-signed CA valid for lifetime from now.
func newCA(now time.Time, lifetime time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kubext-webhook-ca@" + now.UTC().Format(time.RFC3339)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return encode(der, key)
}

// newServing makes a serving certificate for dnsNames and ips signed by ca,
// valid for lifetime from now but never beyond the CA: a certificate that
// outlives its CA would stop verifying before anyone rotated it.
func newServing(ca *keyPair, now time.Time, lifetime time.Duration, dnsNames []string, ips []net.IP) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	return encode(der, key)
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encode(der []byte, key *ecdsa.PrivateKey) (*keyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// parseKeyPair parses a PEM certificate (the first one in certPEM) and its
// PEM private key and checks that they belong together.
func parseKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		if parsed, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, errors.New("private key cannot sign")
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return nil, errors.New("private key does not match the certificate")
	}
	return &keyPair{cert: certs[0], key: key, certPEM: pemOf(certs[0]), keyPEM: keyPEM}, nil
}

// parseCerts parses every CERTIFICATE block of a PEM bundle; any other
// content is an error, so that garbage is never passed on.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := bytes.TrimSpace(data); len(rest) > 0; rest = bytes.TrimSpace(rest) {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("not PEM")
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func pemBundle(cs []*x509.Certificate) []byte {
	var b []byte
	for _, c := range cs {
		b = append(b, pemOf(c)...)
	}
	return b
}

// validCA says why c cannot serve as a CA at now, or nil.
func validCA(c *x509.Certificate, now time.Time) error {
	if !c.IsCA || !c.BasicConstraintsValid {
		return errors.New("not a CA certificate")
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		return fmt.Errorf("not self-signed: %w", err)
	}
	return validAt(c, now)
}

func validAt(c *x509.Certificate, now time.Time) error {
	if now.Before(c.NotBefore) {
		return fmt.Errorf("not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	if !now.Before(c.NotAfter) {
		return fmt.Errorf("expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// verifyServing says why the serving certificate cannot be verified by a
// client that trusts roots and connects to each of dnsNames (and ips) at
// now, or nil. This is the check the API server makes.
func verifyServing(c *x509.Certificate, roots []*x509.Certificate, now time.Time, dnsNames []string, ips []net.IP) error {
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	for _, name := range dnsNames {
		if _, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return err
		}
	}
	for _, ip := range ips {
		if err := c.VerifyHostname(ip.String()); err != nil {
			return err
		}
	}
	return nil
}

// due says whether c, issued for lifetime, has less than a third of it
// left at now. It goes by the lifetime asked for rather than the
// certificate's span, which includes the backdate.
func due(c *x509.Certificate, now time.Time, lifetime time.Duration) bool {
	return c.NotAfter.Sub(now) < lifetime/3
}

// signedBy says whether c's signature verifies with ca's key.
func signedBy(c, ca *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, ca.RawSubject) && c.CheckSignatureFrom(ca) == nil
}
