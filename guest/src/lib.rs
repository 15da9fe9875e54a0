wit_bindgen::generate!({ world: "sandbox", path: "../wit" });
