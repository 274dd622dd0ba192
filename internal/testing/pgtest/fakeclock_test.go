package pgtest

import (
	"context"
	"testing"
	"time"
)

func TestFakeClockDrivesNowDefaultsAndTriggers(t *testing.T) {
	c := NewCluster(t)
	ctx := context.Background()
	if err := c.CreateDatabase(ctx, "base", ""); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := InstallFakeClock(ctx, c.URL("base"), start); err != nil {
		t.Fatal(err)
	}
	fakeURL, err := FakeClockURL(c.URL("base"))
	if err != nil {
		t.Fatal(err)
	}
	db := connect(t, fakeURL)
	// A default and a trigger, both created after the install.
	if _, err := db.Exec(ctx, `
		CREATE TABLE ev (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), touched timestamptz);
		CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.touched := now(); RETURN NEW; END $$;
		CREATE TRIGGER ev_touch BEFORE UPDATE ON ev FOR EACH ROW EXECUTE FUNCTION touch();`); err != nil {
		t.Fatal(err)
	}
	clock, err := OpenFakeClock(ctx, c.URL("base"))
	if err != nil {
		t.Fatal(err)
	}
	defer clock.Close(ctx)
	if _, err := db.Exec(ctx, `INSERT INTO ev (id) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	later := start.Add(36 * time.Hour)
	if err := clock.Set(ctx, later); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE ev SET id = 1`); err != nil {
		t.Fatal(err)
	}
	var at, touched, now time.Time
	if err := db.QueryRow(ctx, `SELECT at, touched, now() FROM ev`).Scan(&at, &touched, &now); err != nil {
		t.Fatal(err)
	}
	if !at.Equal(start) || !touched.Equal(later) || !now.Equal(later) {
		t.Fatalf("default %v, trigger %v, now() %v; want %v, %v, %v", at, touched, now, start, later, later)
	}
	// Without the search path, now() is the server's.
	plain := connect(t, c.URL("base"))
	if err := plain.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(now); d < -time.Minute || d > time.Minute {
		t.Fatalf("plain now() = %v, want the real time", now)
	}
	if got, err := clock.Now(ctx); err != nil || !got.Equal(later) {
		t.Fatalf("clock.Now = %v, %v", got, err)
	}
}
