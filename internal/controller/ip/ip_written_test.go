package ip

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// A cached IP at the version the controller's last write started from is
// stale until the cache shows any later version; then the record goes.
func TestOwnWritesKeepReconcilesOffAStaleCache(t *testing.T) {
	var w ownWrites
	at := func(rv string) *ipv1.IP {
		return &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: rv}}
	}
	if w.stale(at("5")) {
		t.Fatal("stale with no write recorded")
	}
	w.wrote("a", "5", "5") // nothing written
	if w.stale(at("5")) {
		t.Fatal("stale after a write that changed nothing")
	}
	w.wrote("a", "5", "6")
	for range 2 { // and stays so while the cache is there
		if !w.stale(at("5")) {
			t.Fatal("the version written from is not stale")
		}
	}
	if w.stale(at("7")) { // someone else wrote after us: fresh
		t.Fatal("a later version is stale")
	}
	if w.stale(at("5")) {
		t.Fatal("the record outlived the cache catching up")
	}
	w.wrote("a", "8", "9")
	w.forget("a")
	if w.stale(at("8")) {
		t.Fatal("stale after forget")
	}
}
